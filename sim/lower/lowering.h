// The lowering's private header: the Lowerer class (Scenario -> Program, lower.h) and the
// state its techniques share (the model's units per virtual stage, the per-rank Emit state,
// the gradient bucketer). Its member functions are defined by technique:
//  - lower.cc:            the public entry points and the setup (units, nominal schedule)
//  - groups.cc:           communication groups, NCCL communicator memory, rank retargeting
//  - emit.cc:             labels, tasks, collectives, memory events, a unit's steps
//  - tensor_parallel.cc:  the model's CommPoints (TP / sequence parallel, EP), the TP
//                         overlap and Transformer Engine's backward order
//  - context_parallel.cc: ring and all-gather context-parallel attention
//  - fp8.cc:              Transformer Engine's fp8 saved inputs and weight cache
//  - data_parallel.cc:    DP gradient buckets, ZeRO-1/2/3 (gathers, frees, sharded
//                         gradients), the parameter gathers
//  - zero3_fetch.cc:      ZeRO-3 parameter fetches per submodule (DeepSpeed stage 3)
//  - passes.cc:           the rank program: step start and end, pipeline recvs, the
//                         forward / backward / weight passes, recompute
//  - pipeline_p2p.cc:     pipeline sends, scatter-gather of a message, blocking p2p calls
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/workload.h"
#include "sim/lower/lower.h"
#include "sim/lower/schedule.h"
#include "sim/plan/layout.h"

namespace stepcast::lowering {

// One block of a model chunk: the embedding, a transformer layer, or the output head.
struct Unit {
  enum class Kind { kEmbed, kLayer, kHead } kind = Kind::kLayer;
  int layer = -1;  // global layer index (kLayer), else -1
  const LayerOps* ops = nullptr;
  std::string name;                            // "L12", "emb", "head"
  double act_bytes = 0;                        // saved per microbatch under the plan's recompute
  double act_full_bytes = 0;                   // re-materialised during a full-recompute backward
  double dense_params = 0, expert_params = 0;  // held on this rank
  double dense_grad_bytes = 0, expert_grad_bytes = 0;
  double fwd_flops = 0, bwd_input_flops = 0, bwd_weight_flops = 0, recompute_flops = 0;
  // The output layer's call within a microbatch's forward (the MTP modules' calls first,
  // then the model's own), -1 for a unit that is not a call of the output layer: the index
  // of its entry in Megatron's deferred-wgrad buffers (FrameworkRules::
  // defer_embedding_wgrad_compute).
  int output_call = -1;
};

// FLOPs of the compute steps (only those re-run by selective recompute when selective_only).
double steps_flops(const std::vector<Step>& steps, bool selective_only = false);
// Appends the decimal digits of v to s.
void append_int(std::string& s, long long v);
// "fwd.L12.qkv.mb3" (no ".mb" part when mb < 0).
std::string make_label(const char* prefix, const std::string& unit, const std::string& op, int mb);

// A pipeline message's place in the order of its stream (passes.cc, top of the file).
struct MsgKey {
  double key = 0;  // nominal start of the consuming pass
  int consumer_vs = 0;
  int dir = 0;  // 0: activation forward, 1: gradient backward
  int mb = 0;
  bool operator<(const MsgKey& o) const {
    return std::tie(key, consumer_vs, dir, mb) < std::tie(o.key, o.consumer_vs, o.dir, o.mb);
  }
};

class Lowerer {
 public:
  Lowerer(const Scenario& sc, const LowerOptions& opt);

  // A stage's parameters (dense and expert) and the bytes of its weights, gradients and
  // optimizer state per rank (model/memory.h; ZeRO stage z shards over the dp(xcp) group,
  // expert parameters over the expert-dp group), in kTrainingStateWhat order.
  struct StageState {
    double dense = 0, expert = 0;
    std::array<double, 3> bytes{};
  };
  // Throws InputError when the gradients make implausibly many buckets.
  StageState stage_state(int s) const;
  std::vector<std::array<double, 3>> state_bytes_per_stage() const;
  Program run();

 private:
  // ---- per-rank state --------------------------------------------------------------------

  struct Emit {
    RankProgram rp;
    int rank = 0;
    RankCoord coord;
    int last_compute = -1;
    int prev_compute = -1;        // the compute task before last_compute
    std::vector<int> pending;     // comm tasks the next compute task waits for
    std::vector<int> after_next;  // comm tasks the compute task after the next waits for
    // Tasks the next compute task waits for, a weight-gradient one too (emit_weight_grads
    // sets `pending` aside, not these): the host waited for them before it queued more work.
    std::vector<int> host_waits;
    // Communication set aside while steps run beside it (Step::beside_comm); the next step
    // without the flag waits for it.
    std::vector<int> held_comm;
    bool beside = false;  // inside such a run
    // Collectives a weight-gradient GEMM waits for (CommPoint::feeds_wgrad), by unit,
    // microbatch and GEMM name; consumed when that GEMM is emitted.
    std::map<std::tuple<const Unit*, int, std::string>, int> wgrad_inputs;
    // ZeRO-2 with overlap: the reduce-scatter of the last bucket issued per group (dense [0],
    // expert [1]), which the backward waits for after the next unit that issues a bucket
    // (the two-buffer wait, sharded_grads_ready).
    int z2_last_bucket[2] = {-1, -1};
    // ZeRO-2/3: the gradient reductions issued so far, in order (the host's reduce events,
    // FrameworkRules::zero3_max_inflight_reduces and sync_reduces_each_backward).
    std::vector<int> dp_reduces;
  };

  // Gradient buckets (Megatron DDP, ddp.py / param_and_grad_buffer.py): parameters are
  // bucketed in backward order; a bucket's collective is launched when its last gradient is
  // ready in the last microbatch. Sizes are cut exactly at bucket_bytes, so a stage with G
  // bytes of gradients issues ceil(G / bucket_bytes) collectives per group.
  struct Bucketer {
    double dense = 0, expert = 0;
    // ZeRO-3: the units' whole gradients (dense [0], expert [1]) in the bucket being filled,
    // freed when its reduce-scatter ends.
    struct UnitGrads {
      std::string what;
      double bytes;
      int layer;
    };
    std::vector<UnitGrads> held[2];
  };

  struct DeferredBucket {
    double bytes;
    bool expert;
    int chunk;
    int layer;
    int after;  // compute task id whose end makes the bucket ready
  };

  // A pipeline send, emitted once the passes are done, in the order of its key.
  struct SendRec {
    MsgKey key;
    int to_stage;
    std::vector<int> deps;
    int chunk, mb;
    int pass = 0;  // index of the producing pass in the stage's order
  };

  // What the parts of one rank's program (lower_rank) share while it is lowered.
  struct RankState {
    StageState st;             // the stage's parameters and training state (stage_state)
    double z2_buckets = 0;     // ZeRO-2 reduce buckets (zero2_bucket_bytes)
    double fp8_weights = 0;    // Transformer Engine's fp8 weight cache (fp8.cc)
    int nccl_alloc = -1;       // the NCCL buffers' allocation, sized at the end; -1: none
    bool sharded_opt = false;  // ZeRO-1/2: a sharded optimizer, parameters gathered
    // ZeRO-1/2 with overlapped parameter gather: per chunk and unit, what it waits for.
    std::vector<std::vector<std::vector<int>>> pg_ready;
    std::vector<int> recv_of;  // per pass of the stage's order: its pipeline recv, or -1
    int pass = 0;              // the pass being lowered (index in the stage's order)
    // Blocking p2p (pp_blocking): per pass, the id of its first task and of its last compute
    // task; one more entry for what follows the passes.
    std::vector<int> pass_first, pass_last_compute;
    std::vector<int> send_of;  // per pass: its pipeline send, or -1 (emit_pp_sends)
    double p2p_bytes = 0;      // bytes of one pipeline message
    std::vector<SendRec> sends;
    std::vector<char> chunk_started;  // per chunk: its first forward has run
    std::vector<Bucketer> bucketers;  // per chunk
    // ZeRO-3 without resharding after the forward (FrameworkRules::
    // zero3_reshard_after_forward false): per chunk and unit, the allocation (`what`) of the
    // gathered parameters a forward left unsharded, empty while sharded.
    std::vector<std::vector<std::string>> z3_unsharded;
  };

  // ---- setup (lower.cc) ------------------------------------------------------------------

  void build_units();
  Unit make_aux(Unit::Kind kind, const LayerOps* ops, const char* name);
  // A transformer layer's unit: index `layer` in labels and tasks, its ops and activation
  // terms those of model layer `like` (a multi-token-prediction layer: like the last).
  Unit make_layer(int layer, int like);
  // The output layer's unit (Megatron's cross entropy keeps the fp32 softmax slice).
  Unit make_head(const char* name);
  void fill_flops(Unit& u) const;
  void build_schedule();
  // The virtual stage of chunk c on stage s, and the stage holding virtual stage vs
  // (schedule.h: interleaved's chunk * p + stage, DualPipeV's V).
  int vstage(int c, int s) const { return virtual_stage(par_.schedule, c, s, p_); }
  int stage_of(int vs) const { return stage_of_virtual(par_.schedule, vs, p_); }
  // The embedding and the output layer on the same stage (one stage, or DualPipeV's stage 0):
  // a tied word embedding is held once there, with no gradient all-reduce between stages.
  bool embed_with_head() const { return stage_of(0) == stage_of(nv_ - 1); }
  size_t vidx(int vs, int mb) const {
    return static_cast<size_t>(vs) * static_cast<size_t>(m_) + static_cast<size_t>(mb);
  }

  // ---- groups (groups.cc) ----------------------------------------------------------------

  int group_of(GroupKind kind, int rank);
  int find_or_add_group(GroupKind kind, int rank);
  double communicator_bytes(const TaskList& tasks, int rank) const;
  RankProgram retarget(const RankProgram& tmpl, const ListNames& used, int g);

  // ---- emission (emit.cc) ----------------------------------------------------------------

  std::string label_of(const char* prefix, const std::string& unit, const std::string& op,
                       int mb) const;
  int add(Emit& e, Task&& t) { return add_task(e.rp, std::move(t)); }
  Task base_task(TaskKind kind, StreamKind stream, Phase phase, Category cat, int layer, int mb,
                 int chunk) const;
  int emit_compute(Emit& e, const Op& op, Phase phase, Category cat, const char* prefix,
                   const Unit& u, int mb, int chunk, std::vector<int> extra_deps = {});
  // emit_compute under a label of the caller's (prefix_unit_op_mb by default).
  int emit_compute_as(Emit& e, const Op& op, Phase phase, Category cat, std::string label,
                      const Unit& u, int mb, int chunk, std::vector<int> extra_deps = {});
  int emit_collective(Emit& e, CollOp op, GroupKind gk, StreamKind stream, Category cat,
                      double bytes, DType dtype, Phase phase, std::string label, int layer, int mb,
                      int chunk, std::vector<int> deps, bool ep_kernels = false);
  void emit_mem(Emit& e, TaskKind kind, double bytes, std::string what, Phase phase, int layer,
                int mb, int chunk, StreamKind stream = StreamKind::kCompute,
                std::vector<int> deps = {});
  void emit_steps(Emit& e, std::span<const Step> steps, Phase phase, Category cat,
                  const char* prefix, const Unit& u, int mb, int chunk, int pass,
                  bool selective_only = false);
  static std::string mem_what(const char* prefix, const Unit& u, int mb);
  static std::string act_what(const Unit& u, int mb) { return mem_what("act", u, mb); }
  static std::string rc_what(const Unit& u, int mb) { return mem_what("rcx", u, mb); }

  // ---- tensor / sequence parallel, EP (tensor_parallel.cc) -------------------------------

  void emit_comm_point(Emit& e, const CommPoint& cp, Phase phase, const char* prefix, const Unit& u,
                       int mb, int chunk);
  void emit_tp_overlap(Emit& e, const CommPoint& cp, CollOp op, GroupKind gk, StreamKind stream,
                       Category cat, Phase phase, const char* prefix, const Unit& u, int mb,
                       int chunk, std::vector<int> deps);
  void emit_backward_te_order(Emit& e, const Unit& u, int mb, int c);

  // ---- context parallel (context_parallel.cc) --------------------------------------------

  double kv_block_bytes() const;
  void emit_cp_attention(Emit& e, const Op& op, Phase phase, Category cat, const char* prefix,
                         const Unit& u, int mb, int chunk, int pass);

  // ---- Transformer Engine fp8 (fp8.cc) ---------------------------------------------------

  bool te_fp8() const;
  double te_fp8_activation_delta(int layer, Recompute rc) const;
  double fp8_weight_elems(const Unit& u) const;
  double fp8_weight_cache_bytes(int s) const;
  void emit_fp8_weight_cast(Emit& e, const Unit& u, int mb, int chunk);

  // ---- data parallel and ZeRO (data_parallel.cc) -----------------------------------------

  GroupKind dense_dp_kind() const { return par_.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp; }
  int dense_dp_size() const { return par_.dp * par_.cp; }
  int expert_dp_size() const { return layout_.edp(); }
  double grad_bucket_bytes() const;
  // The bucket size of a zero 0/1 chunk on pipeline stage `stage`: grad_bucket_bytes, or one
  // bucket for the chunk (FrameworkRules::buckets_first_chunk_only).
  double grad_bucket_bytes(int stage, int chunk) const;
  // The collective of a ZeRO-1/2 gradient bucket: a reduce-scatter, or DeepSpeed's
  // all-reduce (FrameworkRules::zero12_all_reduce).
  CollOp sharded_grad_op() const {
    return sc_.framework.zero12_all_reduce ? CollOp::kAllReduce : CollOp::kReduceScatter;
  }
  // ZeRO-1/2's parameter gathers overlap the next forward (overlap.param_gather, unless the
  // stack gathers right after the step: FrameworkRules::zero12_gather_after_step).
  bool overlap_z12_param_gather() const {
    return par_.overlap_param_gather && !sc_.framework.zero12_gather_after_step;
  }
  std::vector<int> zero3_gather(Emit& e, const Unit& u, int mb, int chunk, Phase phase,
                                const char* tag, std::vector<int> deps);
  // Frees the gathered parameters of u allocated as `what` (zp_<unit>_<f|b>_<mb>).
  void zero3_free(Emit& e, const Unit& u, std::string what, int mb, int chunk, Phase phase);
  // The chunk's per-unit record of gathered parameters kept unsharded (RankState::
  // z3_unsharded), or null where ZeRO-3 gathers per block are not in use.
  std::vector<std::string>* zero3_unsharded(RankState& rs, int chunk) const;
  // `unsharded` (may be null): per unit of the chunk, the allocation of parameters still
  // unsharded from a forward; such a unit is not gathered again.
  void zero3_issue(Emit& e, const std::vector<Unit>& units, std::vector<std::vector<int>>& z3,
                   int k, int mb, int c, Phase phase, const char* tag, bool prefetch, bool reverse,
                   const std::vector<std::string>* unsharded);
  // A stage whose gradients would be cut into more buckets than this is not simulated (each
  // bucket is a collective per step; a million of them is far past any real model).
  static constexpr double kMaxBucketsPerStage = 1 << 20;
  void check_bucket_count(double params) const;
  void grads_ready(Emit& e, Bucketer& b, const Unit& u, int chunk, bool flush);
  void emit_bucket(Emit& e, const DeferredBucket& d);
  std::vector<std::vector<std::vector<int>>> emit_param_gathers(Emit& e, std::vector<int> deps);
  void finish_unit_grads(Emit& e, Bucketer& b, const Unit& u, int mb, int c, bool first,
                         bool last_mb);
  void sharded_grads_ready(Emit& e, Bucketer& b, const Unit& u, int mb, int c, bool flush);
  double zero2_bucket_bytes(double dense, double expert) const;

  // ---- ZeRO-3 fetches per submodule (zero3_fetch.cc) --------------------------------------

  // One fetch: dense parameters gathered together for one forward GEMM (`op`), or for the
  // unit's other parameters at its start (`op` empty: an embedding, or norms and biases
  // that are not persistent).
  struct Z3Fetch {
    double elements = 0;
    std::string op;
  };
  // One use of a fetch in a pass, in execution order: its all-gather is issued at the latest
  // when reached, earlier when prefetched.
  struct Z3Use {
    const Unit* u = nullptr;
    Z3Fetch f;
    bool recompute = false;  // a use by the recomputed forward (else forward or backward)
    bool release = true;     // freed right after its op (else held to the unit's end)
    std::vector<int> ids;    // its all-gathers, once issued
    bool issued = false;
    std::string what;  // its memory event
  };
  struct Z3Pass {
    std::vector<Z3Use> uses;
    size_t reached = 0;        // uses reached so far
    size_t considered = 0;     // uses the prefetch has looked at
    std::vector<int> before;   // per reached use: the last compute task before it
    std::vector<size_t> held;  // uses held to the end of their unit
    int last_sync = -1;        // zero3_fetch_sync: the host's last device synchronize
  };
  bool z3_submodule() const;
  // The persistent parameters of `u` (zero3_persistence_elements): its vectors
  // (LayerOps::vectors) of at most that many elements, each gathered once and kept, so
  // fetched by no use; empty for a MoE unit (fetched as one block) or without the rule.
  std::vector<double> z3_persistent(const Unit& u) const;
  std::vector<Z3Fetch> z3_fetches(const Unit& u) const;
  // After the optimizer step (`after`), the stage's persistent parameters gathered again, one
  // synchronous all-gather each; returns what the step's end waits for (nothing without any).
  std::vector<int> z3_regather_persistent(Emit& e, int after);
  // A device synchronize the host waits on (zero3_fetch_sync, the re-gather's end): a marker
  // on the compute stream after every kernel queued and after `dep`; no kernel, no launch.
  int z3_device_sync(Emit& e, Phase phase, int layer, int mb, int c, std::string label, int dep);
  Z3Pass z3_plan(const std::vector<Unit>& units, bool backward) const;
  void z3_reach(Emit& e, Z3Pass& zp, const Unit& u, const std::string& op, int mb, int c,
                Phase phase);
  void z3_issue(Emit& e, Z3Pass& zp, size_t i, int mb, int c, Phase phase);
  // FrameworkRules::list_collectives: the per-rank copies of a list all-gather (after it) or
  // reduce-scatter (before it), `bytes` the whole gathered / reduced buffer, on the DP stream.
  int emit_list_copy(Emit& e, double bytes, int ranks, Phase phase, std::string label, int layer,
                     int mb, int c, std::vector<int> deps);
  // FrameworkRules::zero3_copies. zero3_gather_copy: the copy of `bytes` of gathered
  // parameters on the compute stream before they are used (DeepSpeed's rebuild, FSDP2's
  // copy-out), after the gathers in e.pending; `op` names the fetch in the label.
  // zero3_reduce_copy: the copies of `bytes` of gradients before their reduce-scatter
  // (DeepSpeed's on the reduce stream after `deps`, FSDP2's on the compute stream); returns
  // what the reduce-scatter then waits for (`deps` when the rule makes no copy).
  double zero3_gathered_bytes(const Unit& u) const;  // what zero3_gather all-gathers
  void zero3_gather_copy(Emit& e, const Unit& u, double bytes, const std::string& op, int mb, int c,
                         Phase phase);
  std::vector<int> zero3_reduce_copy(Emit& e, const Unit& u, double bytes, bool expert, int mb,
                                     int c, std::vector<int> deps);
  // Steps with the fetches of `u` reached before their GEMMs (and freed after them when
  // released).
  void z3_emit_steps(Emit& e, Z3Pass& zp, const std::vector<Step>& steps, Phase phase, Category cat,
                     const char* prefix, const Unit& u, int mb, int c, int pass);
  // The backward's start of a unit: the full recompute with its fetches; under the TE order
  // or ZB-H1's split, also the backward's fetches (reached at the unit's start).
  void z3_backward_start(Emit& e, Z3Pass& zp, const Unit& u, int mb, int c);
  void z3_free_held(Emit& e, Z3Pass& zp, const Unit& u, int mb, int c, Phase phase);

  // ---- the rank program (passes.cc) ------------------------------------------------------

  RankProgram lower_rank(int rank);
  void emit_step_start(Emit& e, RankState& rs);
  void emit_pp_recvs(Emit& e, RankState& rs, const std::vector<PassOp>& order);
  void forward_pass(Emit& e, RankState& rs, const PassOp& op);
  void backward_pass(Emit& e, RankState& rs, const PassOp& op);
  void weight_pass(Emit& e, RankState& rs, const PassOp& op);
  void emit_deferred_grad_sync(Emit& e);
  void emit_tp_grad_allreduce(Emit& e, int backward_end);
  void emit_step_end(Emit& e, RankState& rs);

  // ---- the MoE all-to-all overlap (moe_overlap.cc) ----------------------------------------

  // What a pass's next tasks wait for (the dependency part of Emit), kept per pass while
  // two passes are emitted interleaved.
  struct PassDeps {
    int last_compute = -1, prev_compute = -1;
    std::vector<int> pending, after_next, host_waits, held_comm;
    bool beside = false;
  };
  struct PairSide;
  static void swap_deps(Emit& e, PassDeps& d);
  // The paired passes fi (an F) and bi (the B after it) of the stage's order, interleaved.
  void merged_passes(Emit& e, RankState& rs, int fi, int bi);
  static void start_unit(PairSide& side, const std::vector<Unit>& units, int k);
  void run_side_units(Emit& e, RankState& rs, PairSide& side, const std::vector<int>& units);
  void side_piece(Emit& e, RankState& rs, PairSide& side, const std::vector<Unit>& units);

  void emit_recompute(Emit& e, const Unit& u, int mb, int c);
  void emit_weight_grads(Emit& e, const Unit& u, int mb, int c,
                         const std::vector<char>* emitted = nullptr);
  void free_unit_activations(Emit& e, const Unit& u, int mb, int c);
  // FrameworkRules::defer_embedding_wgrad_compute: whether this microbatch's call of the
  // output layer defers its weight gradient (and, under sequence parallel, the input's
  // re-gather) to the drain after the stage's last backward; the drain itself.
  bool output_wgrad_deferred(const Unit& u, int mb) const;
  long long output_call_entry(const Unit& u, int mb) const;
  double deferred_wgrad_bytes(const Unit& u) const;
  void emit_output_wgrad_drain(Emit& e);
  double held_grad_output_bytes(const Unit& u) const;

  // ---- pipeline messages as the stack issues them (pipeline_p2p.cc) ----------------------

  // The recv pass `i` consumes into e.pending: the recv itself, or with Megatron-LM's
  // scatter-gather the tensor all-gather of the received slices that follows it.
  void take_pp_recv(Emit& e, const RankState& rs, const PassOp& op, size_t i);
  bool p2p_scatter_gather() const;
  void emit_pp_sends(Emit& e, RankState& rs);
  bool pp_blocking() const;
  void block_on_pp(Emit& e, const RankState& rs, const std::vector<PassOp>& order);

  std::int64_t pp_tag(const MsgKey& k) const {
    return (static_cast<std::int64_t>(k.dir) * nv_ + k.consumer_vs) * m_ + k.mb;
  }
  size_t estimate_tasks(int s) const;

  // ---- state -----------------------------------------------------------------------------

  const Scenario& sc_;
  const ParallelSpec& par_;
  const ModelArch& arch_;
  RankLayout layout_;
  LowerOptions opt_;
  ShardSpec shard_;
  int p_ = 1, v_ = 1, nv_ = 1, m_ = 1;
  // The B being lowered defers its weight gradients to a W pass (PassOp::defer_w), or the
  // pass being lowered is a W: set per pass by lower_rank.
  bool split_w_ = false;
  // A pair's two passes both wait for both pipeline messages: DualPipeV's
  // _forward_backward_chunk receives both (_recv_forward, _recv_backward) and waits for them
  // (_commit_and_wait_comm) before either runs; Megatron-Core's pairs wait each for its own.
  bool pair_waits_both_ = false;
  bool te_order_ = false;        // emit_backward_te_order
  std::vector<char> emitted_w_;  // its weight gradients emitted, for emit_weight_grads
  // Activations on the wire and gathered (ZeRO) weights: 16-bit under bf16/fp16/fp8.
  DType act_dtype_ = DType::kBf16;
  double act_elem_bytes_ = 2;
  DType grad_dtype_ = DType::kFp32;
  double grad_bytes_per_param_ = 4;
  std::vector<int> vs_layers_;
  // By kind of layer: [moe + 2 windowed]; the units point into these.
  std::array<std::optional<LayerOps>, 4> layer_ops_;
  LayerOps embed_ops_, head_ops_, mtp_ops_;
  std::vector<std::vector<Unit>> chunks_;  // per virtual stage
  std::vector<std::vector<PassOp>> orders_;
  std::vector<double> f_start_, b_start_;  // nominal, per (virtual stage, microbatch)
  Program prog_;
  std::unordered_map<std::int64_t, int> group_ids_;      // (kind, first member) -> id
  std::unordered_map<std::int64_t, int> group_of_rank_;  // (kind, rank) -> id (group_of)
  // per rank being lowered
  std::vector<DeferredBucket> deferred_;
  std::vector<int> grad_sync_;
  std::vector<int> param_gathers_;
  int bucket_count_ = 0;
};

}  // namespace stepcast::lowering
