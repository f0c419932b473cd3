// Lowering of a Scenario into a Program. See lower.h for the summary; the rules per technique
// are documented where they are emitted below.
//
// Ordering of pipeline messages. Every stream runs its tasks in issue order and a send meets
// its recv only when both are at the head of their streams. To be deadlock-free for any task
// durations, the pp_recv stream of a rank holds its recvs in the order their consumers run,
// and the pp_send stream its sends in the order their consumers (on the peer) run, both by
// the start times of a nominal run of the schedule (schedule.h, nominal_start_times). Any
// message a pass needs is consumed strictly before the messages that pass produces, so the
// message with the smallest key can always proceed.
#include "sim/lower/lower.h"

#include <algorithm>
#include <limits>
#include <map>
#include <array>
#include <charconv>
#include <cstring>
#include <cmath>
#include <numeric>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "model/error.h"
#include "model/memory.h"
#include "model/params.h"
#include "sim/lower/schedule.h"
#include "sim/plan/layout.h"

namespace stepcast {
namespace {

constexpr std::int64_t kCpTagBase = std::int64_t{1} << 40;

// One block of a model chunk: the embedding, a transformer layer, or the output head.
struct Unit {
  enum class Kind { kEmbed, kLayer, kHead } kind = Kind::kLayer;
  int layer = -1;            // global layer index (kLayer), else -1
  const LayerOps* ops = nullptr;
  std::string name;          // "L12", "emb", "head"
  double act_bytes = 0;      // saved per microbatch under the plan's recompute
  double act_full_bytes = 0; // re-materialised during a full-recompute backward
  double dense_params = 0, expert_params = 0;  // held on this rank
  double dense_grad_bytes = 0, expert_grad_bytes = 0;
  double fwd_flops = 0, bwd_input_flops = 0, bwd_weight_flops = 0, recompute_flops = 0;
};

double steps_flops(const std::vector<Step>& steps, bool selective_only = false) {
  double f = 0;
  for (const Step& s : steps)
    if (!s.is_comm && (!selective_only || s.recompute_selective)) f += s.op.flops;
  return f;
}

void append_int(std::string& s, long long v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  s.append(buf, r.ptr);
}

// "fwd.L12.qkv.mb3". Sized exactly up front: a label of up to 15 characters then stays in the
// string's own buffer (reserving more, as this did, allocated every label on the heap).
std::string make_label(const char* prefix, const std::string& unit, const std::string& op, int mb) {
  char digits[12];
  const auto mb_end = std::to_chars(digits, digits + sizeof(digits), mb).ptr;
  std::string s;
  s.reserve(std::strlen(prefix) + 1 + unit.size() + 1 + op.size() +
            (mb >= 0 ? 3 + static_cast<size_t>(mb_end - digits) : 0));
  s.append(prefix);
  s.push_back('.');
  s.append(unit);
  s.push_back('.');
  s.append(op);
  if (mb >= 0) {
    s.append(".mb");
    s.append(digits, mb_end);
  }
  return s;
}

struct MsgKey {
  double key = 0;     // nominal start of the consuming pass
  int consumer_vs = 0;
  int dir = 0;        // 0: activation forward, 1: gradient backward
  int mb = 0;
  bool operator<(const MsgKey& o) const {
    return std::tie(key, consumer_vs, dir, mb) < std::tie(o.key, o.consumer_vs, o.dir, o.mb);
  }
};

class Lowerer {
 public:
  Lowerer(const Scenario& sc, const LowerOptions& opt)
      : sc_(sc),
        par_(sc.parallel),
        arch_(sc.model),
        layout_(par_.tp, par_.cp, par_.dp, par_.pp, par_.ep, expert_tp_of(par_.tp, par_.ep, par_.expert_tp)),
        opt_(opt) {
    p_ = par_.pp;
    v_ = par_.vpp;
    nv_ = p_ * v_;
    STEPCAST_CHECK(par_.microbatch >= 1 && sc.training.global_batch >= 1 &&
                       sc.training.seq_len >= 1,
                   fmt::format("microbatch {}, global_batch {}, seq_len {} must be positive",
                               par_.microbatch, sc.training.global_batch, sc.training.seq_len));
    m_ = static_cast<int>(sc.microbatches());
    STEPCAST_CHECK(m_ >= 1, fmt::format("{} microbatches: global_batch {} / (dp {} x microbatch {})",
                                        m_, sc.training.global_batch, par_.dp, par_.microbatch));
    STEPCAST_CHECK(sc.gpus == 0 || sc.gpus == layout_.world_size(),
                   fmt::format("plan covers {} ranks, cluster has {} GPUs", layout_.world_size(),
                               sc.gpus));
    if (par_.schedule == Schedule::kInterleaved)
      STEPCAST_CHECK(m_ % p_ == 0, fmt::format("interleaved 1F1B needs microbatches ({}) "
                                               "divisible by pp ({})", m_, p_));
    else
      STEPCAST_CHECK(v_ == 1, fmt::format("schedule {} runs one chunk per stage, vpp is {}",
                                          schedule_name(par_.schedule), v_));
    split_w_ = par_.schedule == Schedule::kZbH1;
    te_order_ = par_.overlap_tp_comm;
    shard_.microbatch = par_.microbatch;
    shard_.seq_len = sc.training.seq_len;
    shard_.tp = par_.tp;
    shard_.cp = par_.cp;
    shard_.ep = par_.ep;
    shard_.expert_tp = par_.expert_tp;
    shard_.sequence_parallel = par_.sequence_parallel;
    shard_.dtype = sc.training.dtype;
    shard_.flash_attention = sc.profile.compute.attn_flash;
    STEPCAST_CHECK(shard_.seq_len % (par_.cp > 1 ? 2 * par_.cp : 1) == 0,
                   fmt::format("seq_len {} must split into 2*cp = {} chunks", shard_.seq_len,
                               2 * par_.cp));
    build_units();
    build_schedule();
  }

  // A stage's parameters (dense and expert) and the bytes of its weights, gradients and
  // optimizer state per rank (model/memory.h; ZeRO stage z shards over the dp(xcp) group,
  // expert parameters over the expert-dp group), in kTrainingStateWhat order.
  struct StageState {
    double dense = 0, expert = 0;
    std::array<double, 3> bytes{};
  };
  // Throws InputError when the gradients make implausibly many buckets.
  StageState stage_state(int s) const {
    StageState st;
    for (int c = 0; c < v_; ++c)
      for (const Unit& u : chunks_[static_cast<size_t>(c * p_ + s)]) {
        st.dense += u.dense_params;
        st.expert += u.expert_params;
      }
    check_bucket_count(st.dense + st.expert);
    const bool adam = sc_.training.optimizer == Optimizer::kAdam;
    const int gb = static_cast<int>(grad_bytes_per_param_);
    const auto sd = state_bytes_per_param(sc_.training.dtype, adam, par_.zero, dense_dp_size(), gb);
    const auto se = state_bytes_per_param(sc_.training.dtype, adam, par_.zero, expert_dp_size(), gb);
    st.bytes = {st.dense * sd.weights + st.expert * se.weights,
                st.dense * sd.grads + st.expert * se.grads,
                st.dense * sd.optimizer + st.expert * se.optimizer};
    return st;
  }

  std::vector<std::array<double, 3>> state_bytes_per_stage() const {
    std::vector<std::array<double, 3>> out;
    for (int s = 0; s < p_; ++s) out.push_back(stage_state(s).bytes);
    return out;
  }

  Program run() {
    prog_.world_size = layout_.world_size();
    prog_.folded = opt_.folded;
    prog_.scenario_name = sc_.name;
    prog_.gpus_per_node = sc_.profile.node.gpus;
    if (opt_.folded) {
      prog_.ranks.reserve(static_cast<size_t>(p_));
      for (int s = 0; s < p_; ++s) {
        RankProgram rp = lower_rank(layout_.rank(0, 0, 0, s));
        rp.stands_for = layout_.stage_ranks(s);
        prog_.ranks.push_back(std::move(rp));
        if (opt_.stop_after_stage && opt_.stop_after_stage(prog_)) break;
      }
    } else {
      prog_.ranks.resize(static_cast<size_t>(layout_.world_size()));
      for (int s = 0; s < p_; ++s) {
        for (int c = 0; c < par_.cp; ++c) {
          const int trank = layout_.rank(0, c, 0, s);
          RankProgram tmpl = lower_rank(trank);
          const ListNames used = names_used(tmpl.tasks);
          for (int d = 0; d < par_.dp; ++d) {
            for (int t = 0; t < par_.tp; ++t) {
              const int g = layout_.rank(t, c, d, s);
              RankProgram& rp = prog_.ranks[static_cast<size_t>(g)];
              rp = g == trank ? tmpl : retarget(tmpl, used, g);
              rp.stands_for = {g};
            }
          }
        }
      }
    }
    return std::move(prog_);
  }

 private:
  // ---- setup ---------------------------------------------------------------------------

  void build_units() {
    vs_layers_ = virtual_stage_layers(sc_);
    embed_ops_ = embedding_ops(arch_, shard_);
    head_ops_ = logits_loss_ops(arch_, shard_);
    act_dtype_ = activation_dtype(sc_.training.dtype);
    act_elem_bytes_ = dtype_bytes(act_dtype_);
    // Gradient accumulation and reduction dtype: training.grad_reduce_dtype, else what
    // Megatron-LM (2021 on) and Megatron-Core do by default (arguments.py): bf16 forces
    // --accumulate-allreduce-grads-in-fp32, so main grads are fp32 and reduced in fp32 (fp8
    // runs keep bf16 params, likewise); fp16 leaves it off (default False), so grads
    // accumulate and are reduced in fp16, the parameter dtype — also the ZeRO paper's fp16
    // gradients (2 bytes).
    grad_dtype_ = grad_reduce_dtype(sc_.training);
    grad_bytes_per_param_ = dtype_bytes(grad_dtype_);
    chunks_.resize(static_cast<size_t>(nv_));
    int layer = 0;
    for (int vs = 0; vs < nv_; ++vs) {
      auto& units = chunks_[static_cast<size_t>(vs)];
      if (vs == 0) units.push_back(make_aux(Unit::Kind::kEmbed, &embed_ops_, "emb"));
      for (int i = 0; i < vs_layers_[static_cast<size_t>(vs)]; ++i, ++layer) {
        // One LayerOps per kind of layer (layer_ops depends on the layer only through
        // is_moe_layer, model/workload.h), shared by the units: computing it for each of the
        // model's layers took 5% of a search.
        std::optional<LayerOps>& kind =
            arch_.is_moe_layer(layer) ? moe_layer_ops_ : dense_layer_ops_;
        if (!kind) kind = layer_ops(arch_, layer, shard_);
        const LayerOps& ops = *kind;
        Unit u;
        u.kind = Unit::Kind::kLayer;
        u.layer = layer;
        u.ops = &ops;
        u.name = fmt::format("L{}", layer);
        u.act_bytes = layer_activation_bytes(arch_, layer, shard_, par_.recompute, shard_.flash_attention);
        u.act_full_bytes = layer_activation_bytes(arch_, layer, shard_, Recompute::kNone, shard_.flash_attention);
        u.expert_params = ops.expert_param_count;
        u.dense_params = ops.param_count - u.expert_params;
        const double frac = ops.param_count > 0 ? u.expert_params / ops.param_count : 0.0;
        u.expert_grad_bytes = ops.param_count * grad_bytes_per_param_ * frac;
        u.dense_grad_bytes = ops.param_count * grad_bytes_per_param_ - u.expert_grad_bytes;
        fill_flops(u);
        units.push_back(std::move(u));
      }
      if (vs == nv_ - 1) {
        units.push_back(make_aux(Unit::Kind::kHead, &head_ops_, "head"));
        if (arch_.tied_embeddings && p_ == 1) {
          // Tied output layer on the embedding's own stage: one weight, held and reduced once
          // (only the final norm is the head's own).
          Unit& h = units.back();
          const double tied = static_cast<double>(arch_.vocab) *
                              static_cast<double>(arch_.hidden) / par_.tp;
          const double own = std::max(0.0, h.dense_params - tied);
          h.dense_grad_bytes *= h.dense_params > 0 ? own / h.dense_params : 0.0;
          h.dense_params = own;
        }
        // Megatron's vocab-parallel cross entropy (tensor_parallel/cross_entropy.py) saves the
        // fp32 softmax of this rank's vocabulary slice for the backward: b x s/cp x V/tp x 4.
        units.back().act_bytes = static_cast<double>(par_.microbatch) *
                                 static_cast<double>(shard_.seq_len / par_.cp) *
                                 static_cast<double>(arch_.vocab) / par_.tp * 4.0;
      }
    }
  }

  Unit make_aux(Unit::Kind kind, const LayerOps* ops, const char* name) {
    Unit u;
    u.kind = kind;
    u.ops = ops;
    u.name = name;
    u.dense_params = ops->param_count;
    u.dense_grad_bytes = ops->param_count * grad_bytes_per_param_;
    fill_flops(u);
    return u;
  }

  void fill_flops(Unit& u) const {
    u.fwd_flops = steps_flops(u.ops->fwd);
    u.bwd_input_flops = steps_flops(u.ops->bwd_input);
    u.bwd_weight_flops = steps_flops(u.ops->bwd_weight);
    if (u.kind == Unit::Kind::kLayer && par_.recompute == Recompute::kFull)
      u.recompute_flops = u.fwd_flops;
    else if (u.kind == Unit::Kind::kLayer && par_.recompute == Recompute::kSelective)
      u.recompute_flops = steps_flops(u.ops->fwd, true);
  }

  void build_schedule() {
    NominalCosts c;
    c.f.assign(static_cast<size_t>(nv_), 1.0);  // +1: strictly positive durations
    c.b = c.f;
    c.w = c.f;
    for (int vs = 0; vs < nv_; ++vs) {
      for (const Unit& u : chunks_[static_cast<size_t>(vs)]) {
        c.f[static_cast<size_t>(vs)] += u.fwd_flops;
        c.b[static_cast<size_t>(vs)] += u.bwd_input_flops + u.recompute_flops +
                                         (split_w_ ? 0.0 : u.bwd_weight_flops);
        c.w[static_cast<size_t>(vs)] += u.bwd_weight_flops;
      }
    }
    orders_ = pipeline_schedule(par_.schedule, p_, v_, m_);
    if (!split_w_) c.w.clear();
    const auto starts = nominal_start_times(orders_, p_, v_, m_, c);
    const size_t n = static_cast<size_t>(nv_) * static_cast<size_t>(m_);
    f_start_.assign(n, 0.0);
    b_start_.assign(n, 0.0);
    for (int s = 0; s < p_; ++s) {
      const auto& ord = orders_[static_cast<size_t>(s)];
      for (size_t i = 0; i < ord.size(); ++i) {
        const int vs = ord[i].chunk * p_ + s;
        const double t = starts[static_cast<size_t>(s)][i];
        if (ord[i].kind == PassKind::kF) f_start_[vidx(vs, ord[i].mb)] = t;
        if (ord[i].kind == PassKind::kB) b_start_[vidx(vs, ord[i].mb)] = t;
      }
    }
  }

  size_t vidx(int vs, int mb) const {
    return static_cast<size_t>(vs) * static_cast<size_t>(m_) + static_cast<size_t>(mb);
  }

  // A task's label (make_label), or none when the caller keeps no labels
  // (LowerOptions::labels).
  std::string label_of(const char* prefix, const std::string& unit, const std::string& op,
                       int mb) const {
    return opt_.labels ? make_label(prefix, unit, op, mb) : std::string();
  }

  // ---- groups --------------------------------------------------------------------------

  int group_of(GroupKind kind, int rank) {
    // Asked once per collective emitted, always for the few ranks being lowered: remembered
    // per (kind, rank), so the members are listed once (a dp group of 256 ranks was listed
    // for every bucket of every microbatch).
    const std::int64_t asked = static_cast<std::int64_t>(kind) * layout_.world_size() + rank;
    if (auto hit = group_of_rank_.find(asked); hit != group_of_rank_.end()) return hit->second;
    const int id = find_or_add_group(kind, rank);
    group_of_rank_.emplace(asked, id);
    return id;
  }

  int find_or_add_group(GroupKind kind, int rank) {
    std::vector<int> members;
    switch (kind) {
      case GroupKind::kTp: members = layout_.tp_group(rank); break;
      case GroupKind::kCp: members = layout_.cp_group(rank); break;
      case GroupKind::kDp: members = layout_.dp_group(rank); break;
      case GroupKind::kDpCp: members = layout_.dp_cp_group(rank); break;
      case GroupKind::kEp: members = layout_.ep_group(rank); break;
      case GroupKind::kEdp: members = layout_.edp_group(rank); break;
      case GroupKind::kPp: {
        // The only pp-kind communicator the lowering uses: Megatron's embedding group, the
        // first and last stage ranks sharing tied word embeddings.
        const RankCoord c = layout_.coord(rank);
        members = {layout_.rank(c.tp, c.cp, c.dp, 0), layout_.rank(c.tp, c.cp, c.dp, p_ - 1)};
        break;
      }
      case GroupKind::kWorld:
        members.resize(static_cast<size_t>(layout_.world_size()));
        std::iota(members.begin(), members.end(), 0);
        break;
    }
    const std::int64_t key = static_cast<std::int64_t>(kind) * layout_.world_size() + members.front();
    auto it = group_ids_.find(key);
    if (it != group_ids_.end()) return it->second;
    Group g;
    g.id = static_cast<int>(prog_.groups.size());
    g.kind = kind;
    g.ranks = std::move(members);
    prog_.groups.push_back(std::move(g));
    group_ids_.emplace(key, prog_.groups.back().id);
    return prog_.groups.back().id;
  }

  // Device memory NCCL holds on `rank` for the communicators its tasks use: one per group
  // its collectives name (of that group's size and node span), and one two-rank
  // communicator per peer of its sends and receives (point-to-point connections are made
  // per peer), each as collectives.communicator_memory gives it. Ranks that share a task
  // list (folded, or full-fidelity copies) take the lowered rank's figure: their groups have
  // the same sizes, but a peer on the same node for one may be on the next node for another.
  double communicator_bytes(const TaskList& tasks, int rank) const {
    const int per_node = std::max(1, sc_.profile.node.gpus);
    const ListNames used = names_used(tasks);
    double sum = 0;
    for (const int id : used.groups) {
      const std::vector<int>& members = prog_.groups[static_cast<size_t>(id)].ranks;
      if (members.size() < 2) continue;
      std::vector<int> nodes;
      for (const int r : members) nodes.push_back(r / per_node);
      std::sort(nodes.begin(), nodes.end());
      const auto span = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
      sum += communicator_memory_bytes(sc_.profile.collectives, static_cast<int>(members.size()),
                                       static_cast<int>(span));
    }
    for (const int peer : used.peers)
      if (peer != rank)
        sum += communicator_memory_bytes(sc_.profile.collectives, 2,
                                         peer / per_node == rank / per_node ? 1 : 2);
    return sum;
  }

  // A full-fidelity copy of a template rank for global rank g of the same stage and cp
  // index: it shares the template's task list (program.h); collectives name g's groups of
  // the same kinds, send/recv peers keep their cp and pp coordinates and take g's tp and dp.
  RankProgram retarget(const RankProgram& tmpl, const ListNames& used, int g) {
    RankProgram rp = tmpl;
    rp.rank = g;
    const RankCoord gc = layout_.coord(g);
    rp.group_remap.clear();
    for (int id : used.groups)
      rp.group_remap.emplace_back(id, group_of(prog_.groups[static_cast<size_t>(id)].kind, g));
    rp.peer_remap.clear();
    for (int peer : used.peers) {
      const RankCoord pc = layout_.coord(peer);
      rp.peer_remap.emplace_back(peer, layout_.rank(gc.tp, pc.cp, gc.dp, pc.pp));
    }
    return rp;
  }

  // ---- per-rank emission ---------------------------------------------------------------

  struct Emit {
    RankProgram rp;
    int rank = 0;
    RankCoord coord;
    int last_compute = -1;
    int prev_compute = -1;     // the compute task before last_compute
    std::vector<int> pending;  // comm tasks the next compute task waits for
    std::vector<int> after_next;  // comm tasks the compute task after the next waits for
    // Tasks the next compute task waits for, a weight-gradient one too (emit_weight_grads
    // sets `pending` aside, not these): the host waited for them before it queued more work.
    std::vector<int> host_waits;
    // Collectives a weight-gradient GEMM waits for (CommPoint::feeds_wgrad), by unit,
    // microbatch and GEMM name; consumed when that GEMM is emitted.
    std::map<std::tuple<const Unit*, int, std::string>, int> wgrad_inputs;
    // ZeRO-2 with overlap: the reduce-scatter of the last bucket issued per group (dense [0],
    // expert [1]), which the backward waits for after the next unit that issues a bucket
    // (the two-buffer wait, sharded_grads_ready).
    int z2_last_bucket[2] = {-1, -1};
  };

  int add(Emit& e, Task&& t) { return add_task(e.rp, std::move(t)); }

  Task base_task(TaskKind kind, StreamKind stream, Phase phase, Category cat, int layer, int mb,
                 int chunk) const {
    Task t;
    t.kind = kind;
    t.stream = stream;
    t.phase = phase;
    t.category = cat;
    t.layer = layer;
    t.microbatch = mb;
    t.chunk = chunk;
    return t;
  }

  int emit_compute(Emit& e, const Op& op, Phase phase, Category cat, const char* prefix,
                   const Unit& u, int mb, int chunk, std::vector<int> extra_deps = {}) {
    Task t = base_task(op.kind == OpKind::kGemm        ? TaskKind::kGemm
                       : op.kind == OpKind::kAttention ? TaskKind::kAttention
                                                       : TaskKind::kMemoryBound,
                       StreamKind::kCompute, phase, cat, u.layer, mb, chunk);
    t.label = label_of(prefix, u.name, op.name, mb);
    if (op.kind == OpKind::kGemm) t.gemm = op.gemm;
    if (op.kind == OpKind::kAttention) t.attn = op.attn;
    // What a memory-bound kernel does ("ln1", "act", "softmax_ce", ...): the executor and
    // the trace tell them apart by it.
    if (op.kind == OpKind::kMemoryBound) t.what = op.name;
    t.flops = op.flops;
    t.bytes_read = op.bytes_read;
    t.bytes_written = op.bytes_written;
    t.deps = std::move(extra_deps);
    t.deps.insert(t.deps.end(), e.pending.begin(), e.pending.end());
    e.pending.clear();
    t.deps.insert(t.deps.end(), e.host_waits.begin(), e.host_waits.end());
    e.host_waits.clear();
    e.prev_compute = e.last_compute;
    e.last_compute = add(e, std::move(t));
    e.pending.insert(e.pending.end(), e.after_next.begin(), e.after_next.end());
    e.after_next.clear();
    return e.last_compute;
  }

  int emit_collective(Emit& e, CollOp op, GroupKind gk, StreamKind stream, Category cat,
                      double bytes, DType dtype, Phase phase, std::string label, int layer, int mb,
                      int chunk, std::vector<int> deps) {
    Task t = base_task(TaskKind::kCollective, stream, phase, cat, layer, mb, chunk);
    t.coll = op;
    t.group = group_of(gk, e.rank);
    t.bytes = bytes;
    t.dtype = dtype;
    t.label = std::move(label);
    t.deps = std::move(deps);
    return add(e, std::move(t));
  }

  void emit_mem(Emit& e, TaskKind kind, double bytes, std::string what, Phase phase, int layer,
                int mb, int chunk, StreamKind stream = StreamKind::kCompute,
                std::vector<int> deps = {}) {
    if (bytes <= 0) return;
    Task t = base_task(kind, stream, phase, Category::kCompute, layer, mb, chunk);
    t.bytes = bytes;
    if (opt_.labels) t.label = (kind == TaskKind::kAlloc ? "alloc." : "free.") + what;
    t.what = std::move(what);
    t.deps = std::move(deps);
    add(e, std::move(t));
  }

  // One model CommPoint -> the collective the plan calls for (or nothing).
  void emit_comm_point(Emit& e, const CommPoint& cp, Phase phase, const char* prefix,
                       const Unit& u, int mb, int chunk) {
    CollOp op = CollOp::kAllReduce;
    GroupKind gk = GroupKind::kTp;
    StreamKind stream = StreamKind::kTp;
    Category cat = Category::kTpComm;
    switch (cp.kind) {
      case CommPointKind::kTpReduce:
        if (par_.tp == 1) return;
        op = par_.sequence_parallel ? CollOp::kReduceScatter : CollOp::kAllReduce;
        break;
      case CommPointKind::kTpGather:
        if (par_.tp == 1 || !par_.sequence_parallel) return;
        op = CollOp::kAllGather;
        break;
      case CommPointKind::kEpDispatch:
      case CommPointKind::kEpCombine:
        if (par_.ep == 1) return;
        op = CollOp::kAllToAll;
        gk = GroupKind::kEp;
        stream = StreamKind::kEp;
        cat = Category::kEpComm;
        break;
    }
    std::vector<int> deps;
    if (e.last_compute >= 0) deps.push_back(e.last_compute);
    if (!cp.feeds_wgrad.empty()) {
      // Runs alongside the input-gradient GEMM that follows (Megatron issues it async before
      // that GEMM; TE's userbuffers overlap it in bulk): only the weight gradient waits. Its
      // gathered [T, h] copy is transient, like the forward's gathered GEMM inputs, and is not
      // allocated: one at a time in Megatron (each linear's weight gradient follows its input
      // gradient), about half of one layer's stored activations.
      e.wgrad_inputs[{&u, mb, cp.feeds_wgrad}] =
          emit_collective(e, op, gk, stream, cat, cp.bytes, act_dtype_, phase,
                          label_of(prefix, u.name, cp.name, mb), u.layer, mb, chunk,
                          std::move(deps));
      return;
    }
    if (par_.overlap_tp_comm && cp.gemm_overlap && gk == GroupKind::kTp &&
        op != CollOp::kAllReduce) {
      // TP communication overlap (Transformer Engine userbuffers, Megatron-Core
      // --tp-comm-overlap), pipelined with the adjacent GEMM:
      //  - all-gather before a column-parallel GEMM (forward qkv/fc1, and the gathered output
      //    gradient before the proj/fc2 input-gradient GEMMs): TE's ring exchange. The GEMM
      //    starts on the rank's own chunk while the other tp - 1 arrive around the ring, one
      //    per step, so none is waited for; the op after the GEMM waits for the exchange. Its
      //    time is the all-gather's: (tp-1)/tp of the bytes over the link. TE issues the
      //    per-chunk GEMMs on several streams, where they overlap one another, so the GEMM
      //    is costed whole, not as tp GEMMs of s/tp rows run one after another.
      //  - reduce-scatter after a forward row-parallel GEMM (proj, fc2): (tp-1)/tp of it runs
      //    alongside the producing GEMM (issued when the GEMM starts), the last chunk after it.
      //  - reduce-scatter after a backward input-gradient GEMM (qkv, fc1): TE's bulk overlap,
      //    whole after the GEMM and beside the weight-gradient GEMM that follows it
      //    (emit_backward_te_order), which does not wait for it; the op after does. With W
      //    split from B (ZB-H1) it is chunked as in forward.
      const double first = cp.bytes / par_.tp;
      const double rest = cp.bytes - first;
      std::string base = label_of(prefix, u.name, cp.name, mb);
      if (op == CollOp::kAllGather) {
        e.after_next.push_back(emit_collective(e, op, gk, StreamKind::kTpRing, cat, cp.bytes,
                                               act_dtype_, phase, std::move(base), u.layer,
                                               mb, chunk, std::move(deps)));
      } else if (phase == Phase::kBwdInput && !split_w_) {
        e.pending.push_back(emit_collective(e, op, gk, stream, cat, cp.bytes, act_dtype_, phase,
                                            std::move(base), u.layer, mb, chunk,
                                            std::move(deps)));
      } else {
        std::vector<int> early;
        if (e.prev_compute >= 0) early.push_back(e.prev_compute);
        const int c0 = emit_collective(e, op, gk, stream, cat, rest, act_dtype_, phase,
                                       base + ".c0", u.layer, mb, chunk, std::move(early));
        deps.push_back(c0);
        const int c1 = emit_collective(e, op, gk, stream, cat, first, act_dtype_, phase,
                                       base + ".c1", u.layer, mb, chunk, std::move(deps));
        e.pending.push_back(c1);
      }
      return;
    }
    const int id = emit_collective(e, op, gk, stream, cat, cp.bytes, act_dtype_, phase,
                                   label_of(prefix, u.name, cp.name, mb), u.layer, mb, chunk,
                                   std::move(deps));
    e.pending.push_back(id);
  }

  // Bytes of this rank's K and V for its s/cp tokens: b x (s/cp) x kv_heads/tp x (d_qk + d_v)
  // x activation bytes (kv heads replicated when tp > kv_heads, as the model does).
  double kv_block_bytes() const {
    const double kv_heads =
        arch_.kv_heads >= par_.tp ? static_cast<double>(arch_.kv_heads) / par_.tp : 1.0;
    return static_cast<double>(par_.microbatch) * static_cast<double>(shard_.seq_len / par_.cp) *
           kv_heads * static_cast<double>(arch_.dim_qk() + arch_.dim_per_head()) * act_elem_bytes_;
  }

  // Context-parallel attention in place of the model's single attention op.
  // pass: 0 forward, 1 backward, 2 recompute.
  void emit_cp_attention(Emit& e, const Op& op, Phase phase, Category cat, const char* prefix,
                         const Unit& u, int mb, int chunk, int pass) {
    const bool bwd = pass == 1;
    const int cp = par_.cp;
    const int ci = e.coord.cp;
    if (par_.cp_kind == CpKind::kAllGather) {
      // Llama 3 (Dubey et al. 2024, section 3.3.2): all-gather K and V over the cp group
      // before attention; in backward reduce-scatter dK, dV. S = the gathered size.
      const double s_bytes = kv_block_bytes() * cp;
      if (!bwd) {
        std::vector<int> deps;
        if (e.last_compute >= 0) deps.push_back(e.last_compute);
        e.pending.push_back(emit_collective(e, CollOp::kAllGather, GroupKind::kCp,
                                            StreamKind::kCp, Category::kCpComm, s_bytes,
                                            act_dtype_, phase,
                                            label_of(prefix, u.name, "cp_ag", mb), u.layer, mb,
                                            chunk, std::move(deps)));
        emit_compute(e, op, phase, cat, prefix, u, mb, chunk);
      } else {
        emit_compute(e, op, phase, cat, prefix, u, mb, chunk);
        e.pending.push_back(emit_collective(e, CollOp::kReduceScatter, GroupKind::kCp,
                                            StreamKind::kCp, Category::kCpComm, s_bytes,
                                            act_dtype_, phase,
                                            label_of(prefix, u.name, "cp_rs", mb), u.layer, mb,
                                            chunk, {e.last_compute}));
      }
      return;
    }
    // Ring attention (Liu et al. 2023; Megatron/TransformerEngine context parallel with
    // causal load balancing): the sequence is cut into 2*cp chunks, rank i holds chunks i
    // and 2cp-1-i (sl = s/cp tokens). Step 0 attends the own KV causally; step j > 0 the KV of
    // rank k = (i - j) mod cp: for k < i both query chunks against KV chunk k (sl x sl/2),
    // for k > i only the second query chunk against both KV chunks (sl/2 x sl) — equal work
    // on every step (see the shape note below). While step j computes, the KV block moves one hop around the ring
    // (send to i+1 on the cp stream, recv from i-1 on the tp stream: different streams so
    // that a folded rank can meet itself). Backward passes KV and dKV: twice the bytes.
    const std::int64_t sl = shard_.seq_len / cp;
    const double bytes = kv_block_bytes() * (bwd ? 2.0 : 1.0);
    const int next = layout_.rank(e.coord.tp, (ci + 1) % cp, e.coord.dp, e.coord.pp);
    const int prev = layout_.rank(e.coord.tp, (ci + cp - 1) % cp, e.coord.dp, e.coord.pp);
    const int kv_producer = e.last_compute;
    int prev_recv = -1;
    for (int j = 0; j < cp; ++j) {
      std::vector<int> deps;
      if (prev_recv >= 0) deps.push_back(prev_recv);
      if (j + 1 < cp) {
        const std::int64_t tag =
            kCpTagBase + ((static_cast<std::int64_t>(u.layer + 2) * m_ + mb) * 3 + pass) * cp + j;
        Task s = base_task(TaskKind::kSend, StreamKind::kCp, phase, Category::kCpComm, u.layer, mb,
                           chunk);
        s.peer = next;
        s.tag = tag;
        s.bytes = bytes;
        s.label = label_of(prefix, u.name, "cp_send", mb);
        if (j == 0) {
          if (kv_producer >= 0) s.deps.push_back(kv_producer);
        } else {
          s.deps.push_back(prev_recv);
        }
        add(e, std::move(s));
        Task r = base_task(TaskKind::kRecv, StreamKind::kCpRecv, phase, Category::kCpComm, u.layer, mb,
                           chunk);
        r.peer = prev;
        r.tag = tag;
        r.bytes = bytes;
        r.label = label_of(prefix, u.name, "cp_recv", mb);
        prev_recv = add(e, std::move(r));
      }
      // Every rank uses the (sl x sl/2) block shape for j > 0: the same FLOPs as the
      // (sl/2 x sl) blocks of ranks whose KV source comes later, and rank-independent, so that
      // a folded program is exactly the program of every rank it stands for.
      Op step = j == 0 ? attention_op(arch_, shard_, sl, sl, true, bwd)
                       : attention_op(arch_, shard_, sl, sl / 2, false, bwd);
      step.name = op.name + std::to_string(j);
      emit_compute(e, step, phase, cat, prefix, u, mb, chunk, std::move(deps));
    }
  }

  void emit_steps(Emit& e, const std::vector<Step>& steps, Phase phase, Category cat,
                  const char* prefix, const Unit& u, int mb, int chunk, int pass,
                  bool selective_only = false) {
    for (const Step& st : steps) {
      if (selective_only && !st.recompute_selective) continue;
      if (st.is_comm) {
        emit_comm_point(e, st.comm, phase, prefix, u, mb, chunk);
      } else if (st.op.kind == OpKind::kAttention && par_.cp > 1) {
        emit_cp_attention(e, st.op, phase, cat, prefix, u, mb, chunk, pass);
      } else {
        auto it = phase == Phase::kBwdWeight && !e.wgrad_inputs.empty()
                      ? e.wgrad_inputs.find({&u, mb, st.op.name})
                      : e.wgrad_inputs.end();
        if (it == e.wgrad_inputs.end()) {
          emit_compute(e, st.op, phase, cat, prefix, u, mb, chunk);
        } else {
          emit_compute(e, st.op, phase, cat, prefix, u, mb, chunk, {it->second});
          e.wgrad_inputs.erase(it);
        }
      }
    }
  }

  // ---- ZeRO / DP -----------------------------------------------------------------------

  GroupKind dense_dp_kind() const { return par_.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp; }
  int dense_dp_size() const { return par_.dp * par_.cp; }
  int expert_dp_size() const { return layout_.edp(); }

  // Bytes of gradients (grad_dtype_) per DP bucket (parameter-gather buckets hold the same
  // parameters). parallel.bucket_mb when given; otherwise Megatron-Core's default
  // (DistributedDataParallel, core/distributed/distributed_data_parallel.py): bucket_size =
  // max(40,000,000, 1,000,000 x data-parallel size) parameters ("larger DP sizes need larger
  // buckets to ensure collectives do not become latency-bound"), and no bucketing at all
  // (one bucket, bucket_size None) when overlap_grad_reduce is off — also what Megatron-LM
  // 2021 did: one allreduce over the contiguous gradient buffer after the backward.
  double grad_bucket_bytes() const {
    if (par_.bucket_bytes > 0) return par_.bucket_bytes;
    if (!par_.overlap_grad_reduce) return std::numeric_limits<double>::infinity();
    return grad_bytes_per_param_ * std::max(40e6, 1e6 * static_cast<double>(par_.dp));
  }

  // ZeRO-3 / FSDP: gather one unit's parameters (dense over dp(xcp), experts over edp) and
  // allocate the gathered copy. Returns the collective ids.
  std::vector<int> zero3_gather(Emit& e, const Unit& u, int mb, int chunk, Phase phase,
                                const char* tag, std::vector<int> deps) {
    std::vector<int> ids;
    const std::string what = make_label("zp", u.name, tag, mb);
    emit_mem(e, TaskKind::kAlloc, (u.dense_params + u.expert_params) * act_elem_bytes_, what,
             phase, u.layer, mb, chunk, StreamKind::kDp, deps);
    if (u.dense_params > 0 && dense_dp_size() > 1)
      ids.push_back(emit_collective(e, CollOp::kAllGather, dense_dp_kind(), StreamKind::kDp,
                                    Category::kDpComm, u.dense_params * act_elem_bytes_,
                                    act_dtype_, phase, label_of("ag", u.name, tag, mb), u.layer,
                                    mb, chunk, deps));
    if (u.expert_params > 0 && expert_dp_size() > 1)
      ids.push_back(emit_collective(e, CollOp::kAllGather, GroupKind::kEdp, StreamKind::kDp,
                                    Category::kDpComm, u.expert_params * act_elem_bytes_,
                                    act_dtype_, phase, label_of("agx", u.name, tag, mb),
                                    u.layer, mb, chunk, deps));
    return ids;
  }

  void zero3_free(Emit& e, const Unit& u, int mb, int chunk, Phase phase, const char* tag) {
    emit_mem(e, TaskKind::kFree, (u.dense_params + u.expert_params) * act_elem_bytes_,
             make_label("zp", u.name, tag, mb), phase, u.layer, mb, chunk);
  }

  // A stage whose gradients would be cut into more buckets than this is not simulated (each
  // bucket is a collective per step; a million of them is far past any real model).
  static constexpr double kMaxBucketsPerStage = 1 << 20;
  void check_bucket_count(double params) const {
    const double buckets = std::ceil(params * grad_bytes_per_param_ / grad_bucket_bytes());
    if (!(buckets > kMaxBucketsPerStage)) return;
    YAML::Mark m = YAML::Mark::null_mark();
    if (sc_.source.IsMap()) {
      const YAML::Node par = sc_.source["parallel"];
      const YAML::Node key = par && par.IsMap() ? par["bucket_mb"] : YAML::Node();
      if (key) m = key.Mark();
    }
    throw InputError(InputIssue{
        sc_.file, m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1, "parallel.bucket_mb",
        fmt::format("{:.3g} parameters per pipeline stage in buckets of {} make {:.3g} gradient "
                    "collectives per step, more than the {:.0f} stepcast simulates: the model "
                    "is implausibly large, or set a larger parallel.bucket_mb",
                    params, format_bytes(grad_bucket_bytes()), buckets, kMaxBucketsPerStage)});
  }

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

  void grads_ready(Emit& e, Bucketer& b, const Unit& u, int chunk, bool flush) {
    b.dense += u.dense_grad_bytes;
    b.expert += u.expert_grad_bytes;
    const double cap = grad_bucket_bytes();
    auto issue = [&](double bytes, bool expert) {
      if ((expert ? expert_dp_size() : dense_dp_size()) <= 1) return;
      DeferredBucket d{bytes, expert, chunk, u.layer, e.last_compute};
      if (par_.overlap_grad_reduce) {
        emit_bucket(e, d);
      } else {
        deferred_.push_back(d);
      }
    };
    while (b.dense >= cap) {
      issue(cap, false);
      b.dense -= cap;
    }
    while (b.expert >= cap) {
      issue(cap, true);
      b.expert -= cap;
    }
    if (flush) {
      if (b.dense > 0) issue(b.dense, false);
      if (b.expert > 0) issue(b.expert, true);
      b = Bucketer{};
    }
  }

  struct DeferredBucket {
    double bytes;
    bool expert;
    int chunk;
    int layer;
    int after;  // compute task id whose end makes the bucket ready
  };

  void emit_bucket(Emit& e, const DeferredBucket& d) {
    std::vector<int> deps;
    if (d.after >= 0) deps.push_back(d.after);
    std::string label = d.expert ? "gradx.c" : "grad.c";
    append_int(label, d.chunk);
    label += ".b";
    append_int(label, bucket_count_++);
    grad_sync_.push_back(emit_collective(
        e, par_.zero >= 1 ? CollOp::kReduceScatter : CollOp::kAllReduce,
        d.expert ? GroupKind::kEdp : dense_dp_kind(), StreamKind::kDp, Category::kDpComm, d.bytes,
        grad_dtype_, Phase::kOther, std::move(label), d.layer, -1, d.chunk, std::move(deps)));
  }

  // ZeRO-1/2 parameter allgather buckets (Megatron distributed optimizer), in forward order,
  // sized like the gradient buckets in elements (bucket_bytes / 4 fp32 grads -> bf16
  // params). Returns per chunk and unit the collective its parameters arrive with.
  std::vector<std::vector<std::vector<int>>> emit_param_gathers(Emit& e, std::vector<int> deps) {
    std::vector<std::vector<std::vector<int>>> ready(static_cast<size_t>(v_));
    const double cap = grad_bucket_bytes() / grad_bytes_per_param_ * act_elem_bytes_;
    for (int c = 0; c < v_; ++c) {
      const auto& units = chunks_[static_cast<size_t>(c * p_ + e.coord.pp)];
      ready[static_cast<size_t>(c)].resize(units.size());
      double acc[2] = {0, 0};
      std::vector<size_t> waiting[2];
      auto issue = [&](double bytes, int x, const Unit& u) {
        std::string label = x ? "pgx.c" : "pg.c";
        append_int(label, c);
        label += ".b";
        append_int(label, bucket_count_++);
        const int id = emit_collective(e, CollOp::kAllGather, x ? GroupKind::kEdp : dense_dp_kind(),
                                       StreamKind::kDp, Category::kDpComm, bytes, act_dtype_,
                                       Phase::kOptimizer, std::move(label), u.layer, -1, c, deps);
        param_gathers_.push_back(id);
        for (size_t w : waiting[x]) ready[static_cast<size_t>(c)][w].push_back(id);
        waiting[x].clear();
      };
      for (size_t i = 0; i < units.size(); ++i) {
        const Unit& u = units[i];
        const double add_b[2] = {u.dense_params * act_elem_bytes_,
                                 u.expert_params * act_elem_bytes_};
        const int size[2] = {dense_dp_size(), expert_dp_size()};
        for (int x = 0; x < 2; ++x) {
          if (add_b[x] <= 0 || size[x] <= 1) continue;
          acc[x] += add_b[x];
          waiting[x].push_back(i);
          while (acc[x] >= cap) {
            issue(cap, x, u);
            acc[x] -= cap;
            if (acc[x] > 0) waiting[x].push_back(i);
          }
        }
      }
      for (int x = 0; x < 2; ++x)
        if (acc[x] > 0) issue(acc[x], x, units.back());
    }
    return ready;
  }

  // ---- the rank program ----------------------------------------------------------------

  RankProgram lower_rank(int rank) {
    Emit e;
    e.rank = rank;
    e.coord = layout_.coord(rank);
    e.rp.rank = rank;
    e.rp.pp_stage = e.coord.pp;
    deferred_.clear();
    grad_sync_.clear();
    param_gathers_.clear();
    bucket_count_ = 0;
    const int s = e.coord.pp;
    const auto& order = orders_[static_cast<size_t>(s)];
    e.rp.tasks.reserve(estimate_tasks(s));

    // Training state at t = 0.
    const StageState st = stage_state(s);
    const double dense = st.dense, expert = st.expert;
    const std::array<double, 3>& state_bytes = st.bytes;
    const bool adam = sc_.training.optimizer == Optimizer::kAdam;
    for (int i = 0; i < 3; ++i)
      emit_mem(e, TaskKind::kAlloc, state_bytes[i], kTrainingStateWhat[static_cast<size_t>(i)],
               Phase::kOther, -1, -1, -1);
    const double z2_buckets = zero2_bucket_bytes(dense, expert);
    emit_mem(e, TaskKind::kAlloc, z2_buckets, "grad_buckets", Phase::kOther, -1, -1, -1);
    // NCCL's buffers for the communicators this rank uses (collectives.communicator_memory;
    // none listed: not counted, and no task): held all step, sized once the rank's tasks
    // are known (communicator_bytes).
    int nccl_alloc = -1;
    if (!sc_.profile.collectives.communicator_memory.empty()) {
      Task t = base_task(TaskKind::kAlloc, StreamKind::kCompute, Phase::kOther,
                         Category::kCompute, -1, -1, -1);
      t.label = "alloc.nccl";
      t.what = "nccl";
      nccl_alloc = add(e, std::move(t));
    }

    // The step starts by zeroing the gradient buffer the backward accumulates into
    // (Megatron's train_step: zero_grad_buffer on every model chunk, a memset of the whole
    // contiguous buffer; ZeRO-2/3 keep only reduced shards, written rather than accumulated).
    if (par_.zero <= 1 && state_bytes[1] > 0) {
      Op op = zero_grad_op(state_bytes[1]);
      Task t = base_task(TaskKind::kMemoryBound, StreamKind::kCompute, Phase::kOptimizer,
                         Category::kOptimizer, -1, -1, -1);
      t.label = "opt.zero_grad";
      t.what = "zero_grad";
      t.bytes_read = op.bytes_read;
      t.bytes_written = op.bytes_written;
      add(e, std::move(t));  // first on the compute stream: what follows runs after it
    }

    // ZeRO-1/2 with overlapped parameter gather: the previous step's updated parameters
    // arrive in buckets at the start of this step and each chunk's first forward of a unit
    // waits for its bucket (the steady-state equivalent of Megatron's overlap_param_gather,
    // which hides the gather behind the next forward).
    std::vector<std::vector<std::vector<int>>> pg_ready;
    const bool sharded_opt = par_.zero == 1 || par_.zero == 2;
    if (sharded_opt && par_.overlap_param_gather) pg_ready = emit_param_gathers(e, {});

    // Pipeline recvs, in the order their consumers run (see the top of this file).
    const int vs_count = nv_;
    std::vector<std::pair<MsgKey, size_t>> recvs;
    for (size_t i = 0; i < order.size(); ++i) {
      const PassOp& op = order[i];
      const int vs = op.chunk * p_ + s;
      if (op.kind == PassKind::kF && vs > 0)
        recvs.push_back({MsgKey{f_start_[vidx(vs, op.mb)], vs, 0, op.mb}, i});
      if (op.kind == PassKind::kB && vs < vs_count - 1)
        recvs.push_back({MsgKey{b_start_[vidx(vs, op.mb)], vs, 1, op.mb}, i});
    }
    std::sort(recvs.begin(), recvs.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int> recv_of(order.size(), -1);
    const double p2p_bytes = static_cast<double>(par_.microbatch) *
                             static_cast<double>(shard_.seq_len / par_.cp) *
                             static_cast<double>(arch_.hidden) * act_elem_bytes_ /
                             (par_.sequence_parallel ? par_.tp : 1);
    for (const auto& [k, i] : recvs) {
      const PassOp& op = order[i];
      const int from_vs = k.dir == 0 ? k.consumer_vs - 1 : k.consumer_vs + 1;
      Task t = base_task(TaskKind::kRecv, StreamKind::kPpRecv,
                         k.dir == 0 ? Phase::kFwd : Phase::kBwdInput, Category::kPpComm, -1, op.mb,
                         op.chunk);
      t.peer = layout_.rank(e.coord.tp, e.coord.cp, e.coord.dp, from_vs % p_);
      t.tag = pp_tag(k);
      t.bytes = p2p_bytes;
      t.label = label_of("recv", k.dir == 0 ? "act" : "grad", "vs" + std::to_string(k.consumer_vs), op.mb);
      recv_of[i] = add(e, std::move(t));
    }

    struct SendRec {
      MsgKey key;
      int to_stage;
      std::vector<int> deps;
      int chunk, mb;
    };
    std::vector<SendRec> sends;
    std::vector<char> chunk_started(static_cast<size_t>(v_), 0);
    std::vector<Bucketer> bucketers(static_cast<size_t>(v_));
    const bool zero3 = par_.zero == 3;
    const bool prefetch = par_.overlap_param_gather;

    for (size_t i = 0; i < order.size(); ++i) {
      const PassOp& op = order[i];
      const int c = op.chunk, mb = op.mb;
      const int vs = c * p_ + s;
      const auto& units = chunks_[static_cast<size_t>(vs)];
      const int n = static_cast<int>(units.size());
      if (recv_of[i] >= 0) e.pending.push_back(recv_of[i]);
      const bool last_mb = mb == m_ - 1;

      if (op.kind == PassKind::kF) {
        std::vector<std::vector<int>> z3(static_cast<size_t>(n));
        for (int k = 0; k < n; ++k) {
          const Unit& u = units[static_cast<size_t>(k)];
          if (u.act_bytes > 0)
            emit_mem(e, TaskKind::kAlloc, u.act_bytes, act_what(u, mb), Phase::kFwd, u.layer, mb, c);
          if (zero3) zero3_issue(e, units, z3, k, mb, c, Phase::kFwd, "f", prefetch, false);
          e.pending.insert(e.pending.end(), z3[static_cast<size_t>(k)].begin(),
                           z3[static_cast<size_t>(k)].end());
          if (!chunk_started[static_cast<size_t>(c)] && !pg_ready.empty()) {
            const auto& ids = pg_ready[static_cast<size_t>(c)][static_cast<size_t>(k)];
            e.pending.insert(e.pending.end(), ids.begin(), ids.end());
          }
          emit_steps(e, u.ops->fwd, Phase::kFwd, Category::kCompute, "fwd", u, mb, c, 0);
          if (zero3) zero3_free(e, u, mb, c, Phase::kFwd, "f");
        }
        chunk_started[static_cast<size_t>(c)] = 1;
        if (vs < vs_count - 1) {
          SendRec r{MsgKey{f_start_[vidx(vs + 1, mb)], vs + 1, 0, mb}, (vs + 1) % p_, {}, c, mb};
          r.deps = e.pending;
          if (e.last_compute >= 0) r.deps.push_back(e.last_compute);
          sends.push_back(std::move(r));
        }
      } else if (op.kind == PassKind::kB) {
        std::vector<std::vector<int>> z3(static_cast<size_t>(n));
        std::vector<int> grad_out_deps;
        for (int k = n - 1; k >= 0; --k) {
          const Unit& u = units[static_cast<size_t>(k)];
          if (zero3) {
            zero3_issue(e, units, z3, k, mb, c, Phase::kBwdInput, "b", prefetch, true);
            e.pending.insert(e.pending.end(), z3[static_cast<size_t>(k)].begin(),
                             z3[static_cast<size_t>(k)].end());
          }
          emit_recompute(e, u, mb, c);
          if (te_order_ && !split_w_) {
            emit_backward_te_order(e, u, mb, c);
          } else {
            emit_steps(e, u.ops->bwd_input, Phase::kBwdInput, Category::kCompute, "bwd", u, mb,
                       c, 1);
          }
          // ZB-H1 sends the input gradient as soon as B is done; the other schedules send
          // after the whole backward (Megatron: autograd of the chunk, then send_backward).
          if (k == 0 && split_w_) {
            grad_out_deps = e.pending;
            if (e.last_compute >= 0) grad_out_deps.push_back(e.last_compute);
          }
          if (!split_w_) {
            emit_weight_grads(e, u, mb, c, te_order_ ? &emitted_w_ : nullptr);
            if (zero3) zero3_free(e, u, mb, c, Phase::kBwdInput, "b");
            finish_unit_grads(e, bucketers[static_cast<size_t>(c)], u, mb, c, k == 0, last_mb);
          } else if (zero3) {
            zero3_free(e, u, mb, c, Phase::kBwdInput, "b");
          }
        }
        if (!split_w_) {
          grad_out_deps = e.pending;
          if (e.last_compute >= 0) grad_out_deps.push_back(e.last_compute);
        }
        if (vs > 0) {
          SendRec r{MsgKey{b_start_[vidx(vs - 1, mb)], vs - 1, 1, mb}, (vs - 1 + p_) % p_,
                    std::move(grad_out_deps), c, mb};
          sends.push_back(std::move(r));
        }
      } else {  // W (ZB-H1)
        for (int k = n - 1; k >= 0; --k) {
          const Unit& u = units[static_cast<size_t>(k)];
          emit_weight_grads(e, u, mb, c);
          finish_unit_grads(e, bucketers[static_cast<size_t>(c)], u, mb, c, k == 0, last_mb);
        }
      }
    }

    // Without overlap_grad_reduce every bucket waits for the end of the backward.
    const int backward_end = e.last_compute;
    for (DeferredBucket d : deferred_) {
      d.after = backward_end;
      emit_bucket(e, d);
    }

    // Tied embeddings over several stages: the first stage's input embedding and the last
    // stage's output layer are one weight, so their gradients are summed between the two
    // (Megatron finalize_model_grads, _allreduce_word_embedding_grads), after the dp sync.
    if (arch_.tied_embeddings && p_ > 1 && (s == 0 || s == p_ - 1)) {
      std::vector<int> deps = grad_sync_;
      if (backward_end >= 0) deps.push_back(backward_end);
      grad_sync_.push_back(emit_collective(
          e, CollOp::kAllReduce, GroupKind::kPp, StreamKind::kDp, Category::kDpComm,
          static_cast<double>(arch_.vocab) * static_cast<double>(arch_.hidden) / par_.tp *
              grad_bytes_per_param_,
          grad_dtype_, Phase::kOther, "grad.tied_emb", -1, -1, -1, std::move(deps)));
    }

    // Pipeline sends, ordered by their consumers' start (see the top of this file).
    std::stable_sort(sends.begin(), sends.end(),
                     [](const SendRec& a, const SendRec& b) { return a.key < b.key; });
    for (SendRec& r : sends) {
      Task t = base_task(TaskKind::kSend, StreamKind::kPpSend,
                         r.key.dir == 0 ? Phase::kFwd : Phase::kBwdInput, Category::kPpComm, -1,
                         r.mb, r.chunk);
      t.peer = layout_.rank(e.coord.tp, e.coord.cp, e.coord.dp, r.to_stage);
      t.tag = pp_tag(r.key);
      t.bytes = p2p_bytes;
      t.label = label_of("send", r.key.dir == 0 ? "act" : "grad",
                           "vs" + std::to_string(r.key.consumer_vs), r.mb);
      t.deps = std::move(r.deps);
      add(e, std::move(t));
    }

    // Optimizer step on the local shard, after every gradient collective (Megatron
    // finalize_model_grads + optimizer.step).
    const double local_params =
        dense / (par_.zero >= 1 ? dense_dp_size() : 1) + expert / (par_.zero >= 1 ? expert_dp_size() : 1);
    {
      Op op = optimizer_op(local_params, adam, grad_dtype_, sc_.training.dtype == DType::kFp16);
      Task t = base_task(TaskKind::kMemoryBound, StreamKind::kCompute, Phase::kOptimizer,
                         Category::kOptimizer, -1, -1, -1);
      t.label = "opt.step";
      t.what = "optimizer_step";
      t.flops = op.flops;
      t.bytes_read = op.bytes_read;
      t.bytes_written = op.bytes_written;
      t.deps = grad_sync_;
      t.deps.insert(t.deps.end(), e.pending.begin(), e.pending.end());
      e.pending.clear();
      e.last_compute = add(e, std::move(t));
    }
    std::vector<int> end_deps{e.last_compute};
    // ZeRO-1/2 without overlap: the updated parameters are gathered after the step, exposed.
    if (sharded_opt && !par_.overlap_param_gather) {
      emit_param_gathers(e, {e.last_compute});
      end_deps.insert(end_deps.end(), param_gathers_.begin(), param_gathers_.end());
    }
    emit_mem(e, TaskKind::kFree, z2_buckets, "grad_buckets", Phase::kOther, -1, -1, -1,
             StreamKind::kCompute, end_deps);
    if (z2_buckets > 0) end_deps.clear();
    if (nccl_alloc >= 0) {
      const double nccl = communicator_bytes(e.rp.tasks, rank);
      e.rp.tasks.mut(static_cast<size_t>(nccl_alloc)).bytes = nccl;
      emit_mem(e, TaskKind::kFree, nccl, "nccl", Phase::kOther, -1, -1, -1, StreamKind::kCompute,
               end_deps);
      if (nccl > 0) end_deps.clear();
    }
    for (int i = 2; i >= 0; --i) {
      emit_mem(e, TaskKind::kFree, state_bytes[i], kTrainingStateWhat[static_cast<size_t>(i)],
               Phase::kOther, -1, -1, -1,
               StreamKind::kCompute, end_deps);
      end_deps.clear();
    }
    return std::move(e.rp);
  }

  // ZeRO-3 gathers around unit k of a pass (units run forward for F, reverse for B). With
  // prefetch (overlap.param_gather) the next unit's gather is issued when this unit starts;
  // without, each unit's gather waits for the previous unit's compute.
  void zero3_issue(Emit& e, const std::vector<Unit>& units, std::vector<std::vector<int>>& z3,
                   int k, int mb, int c, Phase phase, const char* tag, bool prefetch, bool reverse) {
    const int n = static_cast<int>(units.size());
    const int first = reverse ? n - 1 : 0;
    const int step = reverse ? -1 : 1;
    std::vector<int> deps;
    if (e.last_compute >= 0) deps.push_back(e.last_compute);
    if (k == first || !prefetch)
      z3[static_cast<size_t>(k)] = zero3_gather(e, units[static_cast<size_t>(k)], mb, c, phase, tag, deps);
    const int nk = k + step;
    if (prefetch && nk >= 0 && nk < n)
      z3[static_cast<size_t>(nk)] = zero3_gather(e, units[static_cast<size_t>(nk)], mb, c, phase, tag, deps);
  }

  void emit_recompute(Emit& e, const Unit& u, int mb, int c) {
    if (u.kind != Unit::Kind::kLayer) return;
    if (par_.recompute == Recompute::kFull) {
      // Re-run the whole layer forward, with its collectives (Chen et al. 2016; Megatron
      // --recompute-granularity full): its activations exist again until its backward ends.
      emit_mem(e, TaskKind::kAlloc, u.act_full_bytes - u.act_bytes, rc_what(u, mb),
               Phase::kRecompute, u.layer, mb, c);
      emit_steps(e, u.ops->fwd, Phase::kRecompute, Category::kRecompute, "rc", u, mb, c, 2);
    } else if (par_.recompute == Recompute::kSelective) {
      // Korthikanti et al. 2022, section 5: re-run only the attention core.
      emit_steps(e, u.ops->fwd, Phase::kRecompute, Category::kRecompute, "rc", u, mb, c, 2, true);
    }
  }

  // Weight gradients do not wait for the collectives of the input-gradient pass (Megatron
  // overlaps the dgrad allreduce with the wgrad GEMM); the next compute still does.
  // ZeRO-2 then copies the gradients into the reduce bucket (DeepSpeed contiguous_gradients,
  // stage_1_and_2.py, on by default), every microbatch, for the groups it reduces.
  void emit_weight_grads(Emit& e, const Unit& u, int mb, int c,
                         const std::vector<char>* emitted = nullptr) {
    std::vector<int> stash;
    stash.swap(e.pending);
    if (emitted == nullptr) {
      emit_steps(e, u.ops->bwd_weight, Phase::kBwdWeight, Category::kCompute, "wgt", u, mb, c, 1);
    } else {
      std::vector<Step> rest;
      for (size_t j = 0; j < u.ops->bwd_weight.size(); ++j)
        if (j >= emitted->size() || !(*emitted)[j]) rest.push_back(u.ops->bwd_weight[j]);
      emit_steps(e, rest, Phase::kBwdWeight, Category::kCompute, "wgt", u, mb, c, 1);
    }
    if (par_.zero == 2) {
      for (const bool expert : {false, true}) {
        const double bytes = expert ? u.expert_grad_bytes : u.dense_grad_bytes;
        if (bytes <= 0 || (expert ? expert_dp_size() : dense_dp_size()) <= 1) continue;
        Op copy = grad_copy_op(bytes);
        if (expert) copy.name = "grad_copy_x";
        emit_compute(e, copy, Phase::kBwdWeight, Category::kCompute, "wgt", u, mb, c);
      }
    }
    e.pending.insert(e.pending.end(), stash.begin(), stash.end());
  }

  // Transformer Engine's order (with the TP overlap on, and W not split from B): each
  // linear's weight-gradient GEMM right after its input-gradient GEMM (and after the
  // reduce-scatter that follows it, which runs beside the weight gradient: TE's bulk
  // overlap), as a TE module's backward computes them. The weight gradients emitted here are
  // marked in emitted_w_; emit_weight_grads emits the rest.
  void emit_backward_te_order(Emit& e, const Unit& u, int mb, int c) {
    const std::vector<Step>& bi = u.ops->bwd_input;
    const std::vector<Step>& bw = u.ops->bwd_weight;
    emitted_w_.assign(bw.size(), 0);
    int owed = -1;
    std::vector<int> after_dgrad;  // what the weight gradient waits for: as its input gradient
    for (size_t i = 0; i < bi.size(); ++i) {
      emit_steps(e, {bi[i]}, Phase::kBwdInput, Category::kCompute, "bwd", u, mb, c, 1);
      if (!bi[i].is_comm && bi[i].op.kind == OpKind::kGemm) {
        owed = -1;
        for (size_t j = 0; j < bw.size(); ++j)
          if (!emitted_w_[j] && !bw[j].is_comm && bw[j].op.kind == OpKind::kGemm &&
              bw[j].op.name == bi[i].op.name) {
            owed = static_cast<int>(j);
            break;
          }
        // The ring exchange of the output gradient feeds both GEMMs (the op after the
        // input-gradient GEMM waits for it); the reduce-scatter emitted next does not.
        after_dgrad = e.pending;
      }
      const bool comm_next =
          i + 1 < bi.size() && bi[i + 1].is_comm && bi[i + 1].comm.feeds_wgrad.empty();
      if (owed < 0 || comm_next) continue;
      std::vector<int> stash;
      stash.swap(e.pending);
      e.pending = after_dgrad;
      emit_steps(e, {bw[static_cast<size_t>(owed)]}, Phase::kBwdWeight, Category::kCompute, "wgt",
                 u, mb, c, 1);
      e.pending = std::move(stash);
      emitted_w_[static_cast<size_t>(owed)] = 1;
      owed = -1;
    }
  }

  // A unit's weight gradients are done: sync them (ZeRO-2/3 every microbatch, else buckets in
  // the last one) and free its saved activations (in the order the lowering always had). `first`: the chunk's first unit, whose
  // backward ends the chunk's.
  void finish_unit_grads(Emit& e, Bucketer& b, const Unit& u, int mb, int c, bool first,
                         bool last_mb) {
    if (par_.zero >= 2) {
      sharded_grads_ready(e, b, u, mb, c, first);
      free_unit_activations(e, u, mb, c);
    } else {
      free_unit_activations(e, u, mb, c);
      if (last_mb) grads_ready(e, b, u, c, first);
    }
  }

  // ZeRO-2 and ZeRO-3 / FSDP hold only their shard of the gradients, so they cannot
  // accumulate whole gradients over microbatches: they reduce-scatter every microbatch,
  // adding the reduced shard to the accumulated one (DeepSpeed ZeRO-2/3 reduce in every
  // micro-step's backward; PyTorch FSDP's post-backward hook).
  //  - ZeRO-2 cuts its gradients into buckets as the DP gradients are (grad_bucket_bytes:
  //    bucket_mb, or Megatron-Core's default; one bucket at the end of the backward without
  //    grad_reduce overlap); a bucket goes when it fills, the rest at the chunk's first unit
  //    (`flush`).
  //  - ZeRO-3 reduce-scatters whole FSDP units: by default each unit (a layer) as soon as its
  //    backward ends; with bucket_mb, consecutive units merged until they hold at least that
  //    much (the size-based wrap of PyTorch FSDP, min_num_params), so a small bucket_mb never
  //    cuts a layer.
  // Without overlap.grad_reduce the reduce-scatter runs synchronously: the next compute
  // waits for it (DeepSpeed overlap_comm false).
  // Memory: ZeRO-3 / FSDP holds a unit's whole (unsharded) gradients from its weight-gradient
  // pass until its reduce-scatter ends (FSDP frees the unsharded gradient then), on top of
  // the shard that is training state; an allocation per unit and microbatch, freed on the DP
  // stream behind the reduce-scatter. ZeRO-2 copies gradients into its reduce buckets as they
  // are produced (DeepSpeed contiguous_gradients): those buffers are allocated for the step
  // (zero2_bucket_bytes), not here.
  void sharded_grads_ready(Emit& e, Bucketer& b, const Unit& u, int mb, int c, bool flush) {
    const bool zero3 = par_.zero == 3;
    const double cap = zero3 && par_.bucket_bytes <= 0 ? 0.0 : grad_bucket_bytes();
    for (const bool expert : {false, true}) {
      const double bytes = expert ? u.expert_grad_bytes : u.dense_grad_bytes;
      double& acc = expert ? b.expert : b.dense;
      std::vector<Bucketer::UnitGrads>& held = b.held[expert];
      if ((expert ? expert_dp_size() : dense_dp_size()) <= 1) {
        acc += bytes;  // nothing to reduce: the gradients are the (unsharded) state
        if (flush) acc = 0;
        continue;
      }
      if (zero3 && bytes > 0) {
        std::string what = mem_what(expert ? "zgx" : "zg", u, mb);
        emit_mem(e, TaskKind::kAlloc, bytes, what, Phase::kBwdWeight, u.layer, mb, c);
        held.push_back(Bucketer::UnitGrads{std::move(what), bytes, u.layer});
      }
      int issued_here = -1;  // ZeRO-2 with overlap: the last bucket this unit issued
      auto issue = [&](double rs_bytes) {
        std::vector<int> deps;
        if (e.last_compute >= 0) deps.push_back(e.last_compute);
        const int id = emit_collective(
            e, CollOp::kReduceScatter, expert ? GroupKind::kEdp : dense_dp_kind(),
            StreamKind::kDp, Category::kDpComm, rs_bytes, grad_dtype_, Phase::kBwdWeight,
            label_of(expert ? "rsx" : "rs", u.name, "g", mb), u.layer, mb, c, std::move(deps));
        grad_sync_.push_back(id);
        if (!par_.overlap_grad_reduce) {
          e.pending.push_back(id);
        } else if (!zero3) {
          issued_here = id;
        }
        for (Bucketer::UnitGrads& h : held)
          emit_mem(e, TaskKind::kFree, h.bytes, std::move(h.what), Phase::kBwdWeight, h.layer, mb,
                   c, StreamKind::kDp, {id});
        held.clear();
      };
      acc += bytes;
      if (!zero3) {
        while (acc >= cap) {
          issue(cap);
          acc -= cap;
        }
      }
      if ((flush || (zero3 && acc >= cap)) && acc > 0) {
        issue(acc);
        acc = 0;
      }
      if (issued_here >= 0) {
        // The two-buffer wait (zero2_bucket_bytes), at the granularity of units: the buckets
        // this unit issued are in flight; the backward goes on once those issued before it
        // have been reduced.
        int& before = e.z2_last_bucket[expert];
        if (before >= 0) e.host_waits.push_back(before);
        before = issued_here;
      }
    }
  }

  // DeepSpeed ZeRO-2 (stage_1_and_2.py, contiguous_gradients and overlap_comm): each
  // gradient is copied into a reduce bucket as the backward produces it and the bucket is
  // reduced when full, into two alternating buffers with overlap (one fills while the other
  // reduces), one without; so the whole gradients held at a time never exceed them. Per
  // group with something to reduce: min(the stage's gradients, buffers x bucket size) (one
  // bucket of everything without overlap and bucket_mb: the whole gradients). With two
  // buffers, the gradients that go into bucket j+1 are copied into the buffer of bucket j-1,
  // so once bucket j is issued the backward waits for bucket j-1's reduce-scatter
  // (DeepSpeed's reduce_ipg_grads synchronises the device before it launches the next
  // reduction, so the host queues nothing more until then), in every microbatch and chunk of
  // the step: the backward runs no faster than the reductions. stepcast issues a unit's
  // buckets when its weight-gradient pass ends (not as each fills during it), so it applies
  // the wait per unit: the next compute task waits for the buckets issued before the unit's
  // own. A unit issuing one bucket j waits for j-1, as DeepSpeed does; one issuing several
  // keeps them all in flight (one unit of slack instead of one bucket: the same rate, max of
  // backward and reductions, without charging the unit's compute and its reductions one
  // after the other).
  double zero2_bucket_bytes(double dense, double expert) const {
    if (par_.zero != 2) return 0;
    const double buffers = par_.overlap_grad_reduce ? 2 : 1;
    double bytes = 0;
    if (dense_dp_size() > 1)
      bytes += std::min(dense * grad_bytes_per_param_, buffers * grad_bucket_bytes());
    if (expert_dp_size() > 1)
      bytes += std::min(expert * grad_bytes_per_param_, buffers * grad_bucket_bytes());
    return bytes;
  }

  void free_unit_activations(Emit& e, const Unit& u, int mb, int c) {
    if (u.act_bytes > 0) {
      Phase ph = split_w_ ? Phase::kBwdWeight : Phase::kBwdInput;
      if (u.kind == Unit::Kind::kLayer && par_.recompute == Recompute::kFull)
        emit_mem(e, TaskKind::kFree, u.act_full_bytes - u.act_bytes, rc_what(u, mb), ph, u.layer,
                 mb, c);
      emit_mem(e, TaskKind::kFree, u.act_bytes, act_what(u, mb), ph, u.layer, mb, c);
    }
  }

  static std::string mem_what(const char* prefix, const Unit& u, int mb) {
    std::string s(prefix);
    s.push_back('.');
    s.append(u.name);
    s.append(".mb");
    append_int(s, mb);
    return s;
  }
  static std::string act_what(const Unit& u, int mb) { return mem_what("act", u, mb); }
  static std::string rc_what(const Unit& u, int mb) { return mem_what("rcx", u, mb); }

  std::int64_t pp_tag(const MsgKey& k) const {
    return (static_cast<std::int64_t>(k.dir) * nv_ + k.consumer_vs) * m_ + k.mb;
  }

  size_t estimate_tasks(int s) const {
    size_t per_mb = 8;
    for (int c = 0; c < v_; ++c)
      for (const Unit& u : chunks_[static_cast<size_t>(c * p_ + s)])
        per_mb += 2 * (u.ops->fwd.size() + u.ops->bwd_input.size() + u.ops->bwd_weight.size()) + 4;
    return per_mb * static_cast<size_t>(m_) + 64;
  }

  const Scenario& sc_;
  const ParallelSpec& par_;
  const ModelArch& arch_;
  RankLayout layout_;
  LowerOptions opt_;
  ShardSpec shard_;
  int p_ = 1, v_ = 1, nv_ = 1, m_ = 1;
  bool split_w_ = false;
  bool te_order_ = false;        // emit_backward_te_order
  std::vector<char> emitted_w_;  // its weight gradients emitted, for emit_weight_grads
  // Activations on the wire and gathered (ZeRO) weights: 16-bit under bf16/fp16/fp8.
  DType act_dtype_ = DType::kBf16;
  double act_elem_bytes_ = 2;
  DType grad_dtype_ = DType::kFp32;
  double grad_bytes_per_param_ = 4;
  std::vector<int> vs_layers_;
  std::optional<LayerOps> dense_layer_ops_, moe_layer_ops_;  // the units point into these
  LayerOps embed_ops_, head_ops_;
  std::vector<std::vector<Unit>> chunks_;  // per virtual stage
  std::vector<std::vector<PassOp>> orders_;
  std::vector<double> f_start_, b_start_;  // nominal, per (virtual stage, microbatch)
  Program prog_;
  std::unordered_map<std::int64_t, int> group_ids_;     // (kind, first member) -> id
  std::unordered_map<std::int64_t, int> group_of_rank_;  // (kind, rank) -> id (group_of)
  // per rank being lowered
  std::vector<DeferredBucket> deferred_;
  std::vector<int> grad_sync_;
  std::vector<int> param_gathers_;
  int bucket_count_ = 0;
};

}  // namespace

std::vector<int> virtual_stage_layers(const Scenario& sc) {
  const ParallelSpec& par = sc.parallel;
  const int nv = par.pp * par.vpp;
  const int layers = sc.model.layers;
  if (!par.pipeline_layers.empty()) {
    STEPCAST_CHECK(static_cast<int>(par.pipeline_layers.size()) == nv,
                   fmt::format("pipeline_layers has {} entries, pp x vpp = {}",
                               par.pipeline_layers.size(), nv));
    int sum = 0;
    for (int n : par.pipeline_layers) {
      STEPCAST_CHECK(n >= 0, "pipeline_layers entries must be >= 0");
      sum += n;
    }
    STEPCAST_CHECK(sum == layers,
                   fmt::format("pipeline_layers add up to {}, the model has {} layers", sum, layers));
    return par.pipeline_layers;
  }
  STEPCAST_CHECK(layers % nv == 0,
                 fmt::format("{} layers do not split evenly over pp x vpp = {}", layers, nv));
  return std::vector<int>(static_cast<size_t>(nv), layers / nv);
}

Program lower(const Scenario& sc, const LowerOptions& opt) {
  check_simulation_size(sc, opt.folded);
  Lowerer l(sc, opt);
  return l.run();
}

std::vector<std::array<double, 3>> training_state_bytes(const Scenario& sc) {
  return Lowerer(sc, LowerOptions{}).state_bytes_per_stage();
}

}  // namespace stepcast
