// Lowering (lowering.h): the program of one rank (lower_rank): the training state and the
// step's start, the pipeline recvs, the forward, backward and weight (ZB-H1) passes of the
// stage's schedule with recompute, the pipeline sends (pipeline_p2p.cc), and the step's end
// (gradient sync left to it, optimizer, frees).
//
// Ordering of pipeline messages. Every stream runs its tasks in issue order and a send meets
// its recv only when both are at the head of their streams. To be deadlock-free for any task
// durations, the pp_recv stream of a rank holds its recvs in the order their consumers run,
// and the pp_send stream its sends in the order their consumers (on the peer) run, both by
// the start times of a nominal run of the schedule (schedule.h, nominal_start_times). Any
// message a pass needs is consumed strictly before the messages that pass produces, so the
// message with the smallest key can always proceed.
#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "sim/lower/lowering.h"

namespace stepcast::lowering {

RankProgram Lowerer::lower_rank(int rank) {
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

  RankState rs;
  rs.st = stage_state(s);
  emit_step_start(e, rs);
  emit_pp_recvs(e, rs, order);
  rs.chunk_started.assign(static_cast<size_t>(v_), 0);
  if (par_.zero == 3 &&
      !(sc_.framework.zero3_reshard_after_forward && sc_.framework.zero3_reshard_after_backward))
    for (int c = 0; c < v_; ++c)
      rs.z3_unsharded.emplace_back(chunks_[static_cast<size_t>(vstage(c, s))].size());
  rs.bucketers.resize(static_cast<size_t>(v_));

  for (size_t i = 0; i < order.size(); ++i) {
    const PassOp& op = order[i];
    rs.pass = static_cast<int>(i);
    split_w_ = op.kind == PassKind::kW || op.defer_w;
    rs.pass_first.push_back(static_cast<int>(e.rp.tasks.size()));
    if (op.paired) {  // an F merged with the B after it (moe_overlap.cc)
      rs.pass_first.push_back(static_cast<int>(e.rp.tasks.size()));
      merged_passes(e, rs, static_cast<int>(i), static_cast<int>(i + 1));
      rs.pass_last_compute.push_back(e.last_compute);
      rs.pass_last_compute.push_back(e.last_compute);
      ++i;
      continue;
    }
    take_pp_recv(e, rs, op, i);
    if (op.kind == PassKind::kF) {
      forward_pass(e, rs, op);
    } else if (op.kind == PassKind::kB) {
      backward_pass(e, rs, op);
    } else {  // W (ZB-H1)
      weight_pass(e, rs, op);
    }
    rs.pass_last_compute.push_back(e.last_compute);
  }
  rs.pass_first.push_back(static_cast<int>(e.rp.tasks.size()));

  emit_output_wgrad_drain(e);
  emit_deferred_grad_sync(e);
  emit_pp_sends(e, rs);
  emit_step_end(e, rs);
  if (pp_blocking()) block_on_pp(e, rs, order);
  return std::move(e.rp);
}

// Training state at t = 0, the NCCL buffers, the zeroing of the gradient buffer and (ZeRO-1/2
// with overlap) the parameter gathers the step starts with.
void Lowerer::emit_step_start(Emit& e, RankState& rs) {
  const double dense = rs.st.dense, expert = rs.st.expert;
  const std::array<double, 3>& state_bytes = rs.st.bytes;
  for (int i = 0; i < 3; ++i)
    emit_mem(e, TaskKind::kAlloc, state_bytes[i], kTrainingStateWhat[static_cast<size_t>(i)],
             Phase::kOther, -1, -1, -1);
  rs.z2_buckets = zero2_bucket_bytes(dense, expert);
  emit_mem(e, TaskKind::kAlloc, rs.z2_buckets, "grad_buckets", Phase::kOther, -1, -1, -1);
  // Transformer Engine's fp8 weight cache (fp8.cc), kept across steps.
  rs.fp8_weights = fp8_weight_cache_bytes(e.coord.pp);
  emit_mem(e, TaskKind::kAlloc, rs.fp8_weights, "fp8_weights", Phase::kOther, -1, -1, -1);
  // NCCL's buffers for the communicators this rank uses (collectives.communicator_memory;
  // none listed: not counted, and no task): held all step, sized once the rank's tasks
  // are known (communicator_bytes).
  if (!sc_.profile.collectives.communicator_memory.empty()) {
    Task t = base_task(TaskKind::kAlloc, StreamKind::kCompute, Phase::kOther, Category::kCompute,
                       -1, -1, -1);
    t.label = "alloc.nccl";
    t.what = "nccl";
    rs.nccl_alloc = add(e, std::move(t));
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
  rs.sharded_opt = par_.zero == 1 || par_.zero == 2;
  if (rs.sharded_opt && overlap_z12_param_gather()) rs.pg_ready = emit_param_gathers(e, {});
}

// Pipeline recvs, in the order their consumers run (see the top of this file).
void Lowerer::emit_pp_recvs(Emit& e, RankState& rs, const std::vector<PassOp>& order) {
  const int s = e.coord.pp;
  const int vs_count = nv_;
  std::vector<std::pair<MsgKey, size_t>> recvs;
  for (size_t i = 0; i < order.size(); ++i) {
    const PassOp& op = order[i];
    const int vs = vstage(op.chunk, s);
    // None from this stage itself (DualPipeV's turn of the V on the last stage).
    if (op.kind == PassKind::kF && vs > 0 && stage_of(vs - 1) != s)
      recvs.push_back({MsgKey{f_start_[vidx(vs, op.mb)], vs, 0, op.mb}, i});
    if (op.kind == PassKind::kB && vs < vs_count - 1 && stage_of(vs + 1) != s)
      recvs.push_back({MsgKey{b_start_[vidx(vs, op.mb)], vs, 1, op.mb}, i});
  }
  std::sort(recvs.begin(), recvs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  rs.recv_of.assign(order.size(), -1);
  rs.p2p_bytes = static_cast<double>(par_.microbatch) *
                 static_cast<double>(shard_.seq_len / par_.cp) * static_cast<double>(arch_.hidden) *
                 act_elem_bytes_ / (par_.sequence_parallel || p2p_scatter_gather() ? par_.tp : 1);
  for (const auto& [k, i] : recvs) {
    const PassOp& op = order[i];
    const int from_vs = k.dir == 0 ? k.consumer_vs - 1 : k.consumer_vs + 1;
    Task t =
        base_task(TaskKind::kRecv, StreamKind::kPpRecv, k.dir == 0 ? Phase::kFwd : Phase::kBwdInput,
                  Category::kPpComm, -1, op.mb, op.chunk);
    t.peer = layout_.rank(e.coord.tp, e.coord.cp, e.coord.dp, stage_of(from_vs));
    t.tag = pp_tag(k);
    t.bytes = rs.p2p_bytes;
    t.label =
        label_of("recv", k.dir == 0 ? "act" : "grad", "vs" + std::to_string(k.consumer_vs), op.mb);
    rs.recv_of[i] = add(e, std::move(t));
  }
}

// A forward pass (F) of one microbatch through the units of a chunk.
void Lowerer::forward_pass(Emit& e, RankState& rs, const PassOp& op) {
  const int c = op.chunk, mb = op.mb;
  const int vs = vstage(c, e.coord.pp);
  const auto& units = chunks_[static_cast<size_t>(vs)];
  const int n = static_cast<int>(units.size());
  const bool zero3 = par_.zero == 3;
  const bool prefetch = par_.overlap_param_gather;
  const bool z3_sub = z3_submodule();  // DeepSpeed's fetches per submodule (zero3_fetch.cc)
  Z3Pass zp;
  if (z3_sub) zp = z3_plan(units, false);
  std::vector<std::vector<int>> z3(static_cast<size_t>(n));
  std::vector<std::string>* unsharded = zero3_unsharded(rs, c);
  for (int k = 0; k < n; ++k) {
    const Unit& u = units[static_cast<size_t>(k)];
    if (u.act_bytes > 0)
      emit_mem(e, TaskKind::kAlloc, u.act_bytes, act_what(u, mb), Phase::kFwd, u.layer, mb, c);
    if (zero3 && !z3_sub)
      zero3_issue(e, units, z3, k, mb, c, Phase::kFwd, "f", prefetch, false, unsharded);
    e.pending.insert(e.pending.end(), z3[static_cast<size_t>(k)].begin(),
                     z3[static_cast<size_t>(k)].end());
    if (!z3[static_cast<size_t>(k)].empty())
      zero3_gather_copy(e, u, zero3_gathered_bytes(u), "f", mb, c, Phase::kFwd);
    if (!rs.chunk_started[static_cast<size_t>(c)] && !rs.pg_ready.empty()) {
      const auto& ids = rs.pg_ready[static_cast<size_t>(c)][static_cast<size_t>(k)];
      e.pending.insert(e.pending.end(), ids.begin(), ids.end());
    }
    if (!rs.chunk_started[static_cast<size_t>(c)]) emit_fp8_weight_cast(e, u, mb, c);
    if (z3_sub) {
      z3_emit_steps(e, zp, u.ops->fwd, Phase::kFwd, Category::kCompute, "fwd", u, mb, c, 0);
    } else {
      emit_steps(e, u.ops->fwd, Phase::kFwd, Category::kCompute, "fwd", u, mb, c, 0);
      if (unsharded != nullptr) {
        // Gathered in this pass (not unsharded before it): kept for the backward (and any
        // forward before it), or resharded.
        std::string& kept = (*unsharded)[static_cast<size_t>(k)];
        if (kept.empty()) {
          if (sc_.framework.zero3_reshard_after_forward)
            zero3_free(e, u, make_label("zp", u.name, "f", mb), mb, c, Phase::kFwd);
          else
            kept = make_label("zp", u.name, "f", mb);
        }
      } else if (zero3) {
        zero3_free(e, u, make_label("zp", u.name, "f", mb), mb, c, Phase::kFwd);
      }
    }
  }
  rs.chunk_started[static_cast<size_t>(c)] = 1;
  if (vs < nv_ - 1 && stage_of(vs + 1) != e.coord.pp) {
    SendRec r{
        MsgKey{f_start_[vidx(vs + 1, mb)], vs + 1, 0, mb}, stage_of(vs + 1), {}, c, mb, rs.pass};
    r.deps = e.pending;
    if (e.last_compute >= 0) r.deps.push_back(e.last_compute);
    rs.sends.push_back(std::move(r));
  }
}

// A backward pass (B) of one microbatch through the units of a chunk, in reverse: recompute,
// input gradients, and (unless ZB-H1 splits them off into W) the weight gradients.
void Lowerer::backward_pass(Emit& e, RankState& rs, const PassOp& op) {
  const int c = op.chunk, mb = op.mb;
  const int vs = vstage(c, e.coord.pp);
  const auto& units = chunks_[static_cast<size_t>(vs)];
  const int n = static_cast<int>(units.size());
  const bool last_mb = mb == m_ - 1;
  const bool zero3 = par_.zero == 3;
  const bool prefetch = par_.overlap_param_gather;
  const bool z3_sub = z3_submodule();  // DeepSpeed's fetches per submodule (zero3_fetch.cc)
  Z3Pass zp;
  if (z3_sub) zp = z3_plan(units, true);
  std::vector<std::vector<int>> z3(static_cast<size_t>(n));
  std::vector<std::string>* unsharded = zero3_unsharded(rs, c);
  std::vector<int> grad_out_deps;
  auto free_params = [&](const Unit& u, int k) {
    if (z3_sub) {
      z3_free_held(e, zp, u, mb, c, Phase::kBwdInput);
    } else if (unsharded != nullptr) {
      // Resharded after the backward (after the last microbatch's without
      // zero3_reshard_after_backward): the copy gathered for it or kept from before is freed.
      std::string& kept = (*unsharded)[static_cast<size_t>(k)];
      if (kept.empty()) kept = make_label("zp", u.name, "b", mb);  // gathered for this pass
      if (sc_.framework.zero3_reshard_after_backward || last_mb) {
        zero3_free(e, u, std::move(kept), mb, c, Phase::kBwdInput);
        kept.clear();
      }
    } else if (zero3) {
      zero3_free(e, u, make_label("zp", u.name, "b", mb), mb, c, Phase::kBwdInput);
    }
  };
  for (int k = n - 1; k >= 0; --k) {
    const Unit& u = units[static_cast<size_t>(k)];
    if (zero3 && !z3_sub) {
      zero3_issue(e, units, z3, k, mb, c, Phase::kBwdInput, "b", prefetch, true, unsharded);
      e.pending.insert(e.pending.end(), z3[static_cast<size_t>(k)].begin(),
                       z3[static_cast<size_t>(k)].end());
      if (!z3[static_cast<size_t>(k)].empty())
        zero3_gather_copy(e, u, zero3_gathered_bytes(u), "b", mb, c, Phase::kBwdInput);
    }
    if (z3_sub) {
      z3_backward_start(e, zp, u, mb, c);
    } else {
      emit_recompute(e, u, mb, c);
    }
    if (te_order_ && !split_w_) {
      emit_backward_te_order(e, u, mb, c);
    } else if (z3_sub) {
      z3_emit_steps(e, zp, u.ops->bwd_input, Phase::kBwdInput, Category::kCompute, "bwd", u, mb, c,
                    1);
    } else {
      emit_steps(e, u.ops->bwd_input, Phase::kBwdInput, Category::kCompute, "bwd", u, mb, c, 1);
    }
    // A B that defers its weight gradients (ZB-H1, DualPipeV's zero-bubble B) sends the input
    // gradient as soon as it is done; the others after the whole backward (Megatron:
    // autograd of the chunk, then send_backward).
    if (k == 0 && split_w_) {
      grad_out_deps = e.pending;
      if (e.last_compute >= 0) grad_out_deps.push_back(e.last_compute);
    }
    if (!split_w_) {
      emit_weight_grads(e, u, mb, c, te_order_ ? &emitted_w_ : nullptr);
      free_params(u, k);
      finish_unit_grads(e, rs.bucketers[static_cast<size_t>(c)], u, mb, c, k == 0, last_mb);
    } else {
      // ZB-H1: W needs each linear's output gradient, so B keeps it until W.
      emit_mem(e, TaskKind::kAlloc, held_grad_output_bytes(u), mem_what("dy", u, mb),
               Phase::kBwdInput, u.layer, mb, c);
      free_params(u, k);
    }
  }
  if (!split_w_) {
    grad_out_deps = e.pending;
    if (e.last_compute >= 0) grad_out_deps.push_back(e.last_compute);
  }
  if (vs > 0 && stage_of(vs - 1) != e.coord.pp) {
    SendRec r{MsgKey{b_start_[vidx(vs - 1, mb)], vs - 1, 1, mb},
              stage_of(vs - 1),
              std::move(grad_out_deps),
              c,
              mb,
              rs.pass};
    rs.sends.push_back(std::move(r));
  }
}

// A weight-gradient pass (W, ZB-H1) of one microbatch through the units of a chunk.
void Lowerer::weight_pass(Emit& e, RankState& rs, const PassOp& op) {
  const int c = op.chunk, mb = op.mb;
  const auto& units = chunks_[static_cast<size_t>(vstage(c, e.coord.pp))];
  const int n = static_cast<int>(units.size());
  const bool last_mb = mb == m_ - 1;
  for (int k = n - 1; k >= 0; --k) {
    const Unit& u = units[static_cast<size_t>(k)];
    emit_weight_grads(e, u, mb, c);
    emit_mem(e, TaskKind::kFree, held_grad_output_bytes(u), mem_what("dy", u, mb),
             Phase::kBwdWeight, u.layer, mb, c);
    finish_unit_grads(e, rs.bucketers[static_cast<size_t>(c)], u, mb, c, k == 0, last_mb);
  }
}

// The output gradients a unit's weight-gradient GEMMs read (dW = x^T dy, GEMM [in, out] x
// k = tokens: dy is k x n per batched GEMM), in the activation dtype: what ZB-H1 holds from
// B to W besides the saved inputs (Qi et al. 2023, section 3.1; the zero-bubble Megatron's
// `WeightGradStore.put(total_input, grad_output, ...)` keeps both for the deferred W).
double Lowerer::held_grad_output_bytes(const Unit& u) const {
  double elems = 0;
  for (const Step& st : u.ops->bwd_weight)
    if (!st.is_comm && st.op.kind == OpKind::kGemm)
      elems += static_cast<double>(st.op.gemm.k) * static_cast<double>(st.op.gemm.n) *
               static_cast<double>(st.op.gemm.batch);
  return elems * act_elem_bytes_;
}

// The gradient sync that waits for the end of the backward.
void Lowerer::emit_deferred_grad_sync(Emit& e) {
  const int s = e.coord.pp;
  // Without overlap_grad_reduce every bucket waits for the end of the backward.
  const int backward_end = e.last_compute;
  for (DeferredBucket d : deferred_) {
    d.after = backward_end;
    emit_bucket(e, d);
  }

  emit_tp_grad_allreduce(e, backward_end);

  // Tied embeddings over several stages: the first stage's input embedding and the last
  // stage's output layer are one weight, so their gradients are summed between the two
  // (Megatron finalize_model_grads, _allreduce_word_embedding_grads), after the dp sync.
  if (arch_.tied_embeddings && !embed_with_head() && (s == stage_of(0) || s == stage_of(nv_ - 1))) {
    std::vector<int> deps = grad_sync_;
    if (backward_end >= 0) deps.push_back(backward_end);
    grad_sync_.push_back(
        emit_collective(e, CollOp::kAllReduce, GroupKind::kPp, StreamKind::kDp, Category::kDpComm,
                        static_cast<double>(arch_.vocab) * static_cast<double>(arch_.hidden) /
                            par_.tp * grad_bytes_per_param_,
                        grad_dtype_, Phase::kOther, "grad.tied_emb", -1, -1, -1, std::move(deps)));
  }
}

// Replicated parameters trained under sequence parallel (MLA's down-projections and latent
// norms: LayerOps::tp_grad_params) hold on each tp rank the gradient of its own tokens only:
// Megatron sums them over tp in one coalesced all-reduce after the data-parallel sync
// (finalize_model_grads, _allreduce_non_tensor_model_parallel_grads), before the optimizer.
void Lowerer::emit_tp_grad_allreduce(Emit& e, int backward_end) {
  if (par_.tp == 1) return;
  double params = 0;
  for (int c = 0; c < v_; ++c)
    for (const Unit& u : chunks_[static_cast<size_t>(vstage(c, e.coord.pp))])
      if (u.ops != nullptr) params += u.ops->tp_grad_params;
  if (params <= 0) return;
  std::vector<int> deps = grad_sync_;
  if (backward_end >= 0) deps.push_back(backward_end);
  grad_sync_.push_back(emit_collective(e, CollOp::kAllReduce, GroupKind::kTp, StreamKind::kDp,
                                       Category::kTpComm, params * grad_bytes_per_param_,
                                       grad_dtype_, Phase::kOther, "grad.tp_replicated", -1, -1, -1,
                                       std::move(deps)));
}

// The optimizer step, the ZeRO-1/2 parameter gathers after it (without overlap), and the
// frees of what the step held throughout.
void Lowerer::emit_step_end(Emit& e, RankState& rs) {
  const double dense = rs.st.dense, expert = rs.st.expert;
  const std::array<double, 3>& state_bytes = rs.st.bytes;
  const bool adam = sc_.training.optimizer == Optimizer::kAdam;
  // Optimizer step on the local shard, after every gradient collective (Megatron
  // finalize_model_grads + optimizer.step).
  const double local_params = dense / (par_.zero >= 1 ? dense_dp_size() : 1) +
                              expert / (par_.zero >= 1 ? expert_dp_size() : 1);
  const bool fused = sc_.framework.fused_optimizer;
  // torch.optim's foreach Adam holds sqrt(v) of the whole shard while it runs.
  const double temp = optimizer_temp_bytes(local_params, adam, fused);
  {
    const Op op = optimizer_op(local_params,
                               {.adam = adam,
                                .grads = grad_dtype_,
                                .loss_scaling = sc_.training.dtype == DType::kFp16,
                                .fused = fused,
                                .fp32_params = par_.zero == 3 && sc_.framework.zero3_fp32_shards});
    // Ready once every gradient collective and pending dependency is done.
    std::vector<int> ready = grad_sync_;
    ready.insert(ready.end(), e.pending.begin(), e.pending.end());
    e.pending.clear();
    emit_mem(e, TaskKind::kAlloc, temp, "optimizer_temp", Phase::kOptimizer, -1, -1, -1,
             StreamKind::kCompute, ready);
    Task t = base_task(TaskKind::kMemoryBound, StreamKind::kCompute, Phase::kOptimizer,
                       Category::kOptimizer, -1, -1, -1);
    t.label = "opt.step";
    t.what = "optimizer_step";
    t.flops = op.flops;
    t.bytes_read = op.bytes_read;
    t.bytes_written = op.bytes_written;
    t.deps = std::move(ready);
    e.last_compute = add(e, std::move(t));
  }
  emit_mem(e, TaskKind::kFree, temp, "optimizer_temp", Phase::kOptimizer, -1, -1, -1,
           StreamKind::kCompute, {e.last_compute});
  std::vector<int> end_deps{e.last_compute};
  for (int id : z3_regather_persistent(e, e.last_compute)) end_deps.push_back(id);
  // ZeRO-1/2 without overlap: the updated parameters are gathered after the step, exposed.
  if (rs.sharded_opt && !overlap_z12_param_gather()) {
    emit_param_gathers(e, {e.last_compute});
    end_deps.insert(end_deps.end(), param_gathers_.begin(), param_gathers_.end());
  }
  emit_mem(e, TaskKind::kFree, rs.z2_buckets, "grad_buckets", Phase::kOther, -1, -1, -1,
           StreamKind::kCompute, end_deps);
  if (rs.z2_buckets > 0) end_deps.clear();
  emit_mem(e, TaskKind::kFree, rs.fp8_weights, "fp8_weights", Phase::kOther, -1, -1, -1,
           StreamKind::kCompute, end_deps);
  if (rs.fp8_weights > 0) end_deps.clear();
  if (rs.nccl_alloc >= 0) {
    const double nccl = communicator_bytes(e.rp.tasks, e.rank);
    e.rp.tasks.mut(static_cast<size_t>(rs.nccl_alloc)).bytes = nccl;
    emit_mem(e, TaskKind::kFree, nccl, "nccl", Phase::kOther, -1, -1, -1, StreamKind::kCompute,
             end_deps);
    if (nccl > 0) end_deps.clear();
  }
  for (int i = 2; i >= 0; --i) {
    emit_mem(e, TaskKind::kFree, state_bytes[i], kTrainingStateWhat[static_cast<size_t>(i)],
             Phase::kOther, -1, -1, -1, StreamKind::kCompute, end_deps);
    end_deps.clear();
  }
}

void Lowerer::emit_recompute(Emit& e, const Unit& u, int mb, int c) {
  if (u.kind != Unit::Kind::kLayer) return;
  if (par_.recompute == Recompute::kFull) {
    // Re-run the whole layer forward, with its collectives (Chen et al. 2016; Megatron
    // --recompute-granularity full): its activations exist again until its backward ends.
    emit_mem(e, TaskKind::kAlloc, u.act_full_bytes - u.act_bytes, rc_what(u, mb), Phase::kRecompute,
             u.layer, mb, c);
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
void Lowerer::emit_weight_grads(Emit& e, const Unit& u, int mb, int c,
                                const std::vector<char>* emitted) {
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

// The index of a call of the output layer among the step's calls (its buffer entry).
long long Lowerer::output_call_entry(const Unit& u, int mb) const {
  return static_cast<long long>(mb) * (arch_.mtp_layers + 1) + u.output_call;
}

bool Lowerer::output_wgrad_deferred(const Unit& u, int mb) const {
  const FrameworkRules& f = sc_.framework;
  if (!f.defer_embedding_wgrad_compute || u.output_call < 0) return false;
  // Megatron counts the buffered calls: the first wgrad_deferral_limit of the step (0: all).
  return f.wgrad_deferral_limit == 0 || output_call_entry(u, mb) < f.wgrad_deferral_limit;
}

// What a deferred call keeps: its output gradient [T, V/tp] (grad_output_buffer) and its
// input (embedding_activation_buffer), [T/tp, h] under sequence parallel (the shard before
// the gather), else [T, h]; in the activation dtype.
double Lowerer::deferred_wgrad_bytes(const Unit& u) const {
  const double tokens =
      static_cast<double>(par_.microbatch) * static_cast<double>(shard_.seq_len / par_.cp);
  const double input = tokens * static_cast<double>(arch_.hidden) * act_elem_bytes_ /
                       (par_.sequence_parallel ? par_.tp : 1);
  return held_grad_output_bytes(u) + input;
}

// After the stage's last backward, the weight gradients of the deferred output-layer calls
// in the order they were buffered (Megatron-Core schedules.py finish_embedding_wgrad_compute
// -> utils.py drain_embedding_wgrad_compute, before finalize_model_grads). Under sequence
// parallel each call's input is all-gathered over tp first, into one of two buffers: the
// gather of call i + 1 is issued before the GEMM of call i, once the GEMM of call i - 1 (the
// last reader of its buffer) is done.
void Lowerer::emit_output_wgrad_drain(Emit& e) {
  if (!sc_.framework.defer_embedding_wgrad_compute) return;
  struct Call {
    long long entry;
    const Unit* u;
    int mb, c;
  };
  std::vector<Call> calls;
  for (int c = 0; c < v_; ++c)
    for (const Unit& u : chunks_[static_cast<size_t>(vstage(c, e.coord.pp))])
      for (int mb = 0; mb < m_; ++mb)
        if (output_wgrad_deferred(u, mb)) calls.push_back({output_call_entry(u, mb), &u, mb, c});
  std::sort(calls.begin(), calls.end(),
            [](const Call& a, const Call& b) { return a.entry < b.entry; });
  // Issued before the GEMM of call i - 1, so after the GEMM of call i - 2 (or the backward).
  const bool gathered = par_.tp > 1 && par_.sequence_parallel;
  auto gather = [&](size_t i) -> int {
    const Call& k = calls[i];
    if (!gathered) return -1;
    for (const Step& st : k.u->ops->bwd_input)
      if (st.is_comm && !st.comm.feeds_wgrad.empty()) {
        std::vector<int> deps;
        if (e.last_compute >= 0) deps.push_back(e.last_compute);
        return emit_collective(e, CollOp::kAllGather, GroupKind::kTp, StreamKind::kTp,
                               Category::kTpComm, st.comm.bytes, act_dtype_, Phase::kBwdWeight,
                               label_of("drain", k.u->name, st.comm.name, k.mb), k.u->layer, k.mb,
                               k.c, std::move(deps));
      }
    return -1;
  };
  int next = calls.empty() ? -1 : gather(0);
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& k = calls[i];
    const int ready = next;
    next = i + 1 < calls.size() ? gather(i + 1) : -1;
    std::vector<int> deps;
    if (ready >= 0) deps.push_back(ready);
    for (const Step& st : k.u->ops->bwd_weight)
      if (!st.is_comm)
        emit_compute(e, st.op, Phase::kBwdWeight, Category::kCompute, "wgt", *k.u, k.mb, k.c,
                     std::exchange(deps, {}));
    emit_mem(e, TaskKind::kFree, deferred_wgrad_bytes(*k.u), mem_what("dwo", *k.u, k.mb),
             Phase::kBwdWeight, k.u->layer, k.mb, k.c, StreamKind::kCompute, {e.last_compute});
  }
}

void Lowerer::free_unit_activations(Emit& e, const Unit& u, int mb, int c) {
  if (u.act_bytes > 0) {
    Phase ph = split_w_ ? Phase::kBwdWeight : Phase::kBwdInput;
    if (u.kind == Unit::Kind::kLayer && par_.recompute == Recompute::kFull)
      emit_mem(e, TaskKind::kFree, u.act_full_bytes - u.act_bytes, rc_what(u, mb), ph, u.layer, mb,
               c);
    emit_mem(e, TaskKind::kFree, u.act_bytes, act_what(u, mb), ph, u.layer, mb, c);
  }
}

size_t Lowerer::estimate_tasks(int s) const {
  size_t per_mb = 8;
  for (int c = 0; c < v_; ++c)
    for (const Unit& u : chunks_[static_cast<size_t>(vstage(c, s))])
      per_mb += 2 * (u.ops->fwd.size() + u.ops->bwd_input.size() + u.ops->bwd_weight.size()) + 4;
  return per_mb * static_cast<size_t>(m_) + 64;
}

}  // namespace stepcast::lowering
