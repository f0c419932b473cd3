// Lowering (lowering.h): data parallel and ZeRO: gradient buckets and their collectives
// (grads_ready, deferred without overlap), ZeRO-1/2 parameter gathers, ZeRO-2 / ZeRO-3
// sharded gradients reduce-scattered every microbatch, ZeRO-3 / FSDP parameter gathers and
// frees around each unit.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "model/error.h"
#include "model/params.h"
#include "sim/lower/lowering.h"

namespace stepcast::lowering {

// Bytes of gradients (grad_dtype_) per DP bucket (parameter-gather buckets hold the same
// parameters). parallel.bucket_mb when given; otherwise Megatron-Core's default
// (DistributedDataParallel, core/distributed/distributed_data_parallel.py): bucket_size =
// max(40,000,000, 1,000,000 x data-parallel size) parameters ("larger DP sizes need larger
// buckets to ensure collectives do not become latency-bound"), and no bucketing at all
// (one bucket, bucket_size None) when overlap_grad_reduce is off — also what Megatron-LM
// 2021 did: one allreduce over the contiguous gradient buffer after the backward. A stack
// with its own default (FrameworkRules::grad_bucket_elements: DeepSpeed's 5e8) uses it at
// any overlap.
double Lowerer::grad_bucket_bytes() const {
  if (par_.bucket_bytes > 0) return par_.bucket_bytes;
  if (sc_.framework.grad_bucket_elements > 0)
    return grad_bytes_per_param_ * sc_.framework.grad_bucket_elements;
  if (!par_.overlap_grad_reduce) return std::numeric_limits<double>::infinity();
  return grad_bytes_per_param_ * std::max(40e6, 1e6 * static_cast<double>(par_.dp));
}

double Lowerer::grad_bucket_bytes(int stage, int chunk) const {
  if (sc_.framework.buckets_first_chunk_only && par_.zero <= 1 && (stage > 0 || chunk > 0))
    return std::numeric_limits<double>::infinity();
  return grad_bucket_bytes();
}

// ZeRO-3 / FSDP: gather one unit's parameters (dense over dp(xcp), experts over edp) and
// allocate the gathered copy (zero3_gathered_bytes: a group of one rank holds its part
// whole, nothing to gather). Returns the collective ids.
std::vector<int> Lowerer::zero3_gather(Emit& e, const Unit& u, int mb, int chunk, Phase phase,
                                       const char* tag, std::vector<int> deps) {
  std::vector<int> ids;
  const std::string what = make_label("zp", u.name, tag, mb);
  emit_mem(e, TaskKind::kAlloc, zero3_gathered_bytes(u), what, phase, u.layer, mb, chunk,
           StreamKind::kDp, deps);
  if (u.dense_params > 0 && dense_dp_size() > 1)
    ids.push_back(emit_collective(e, CollOp::kAllGather, dense_dp_kind(), StreamKind::kDp,
                                  Category::kDpComm, u.dense_params * act_elem_bytes_, act_dtype_,
                                  phase, label_of("ag", u.name, tag, mb), u.layer, mb, chunk,
                                  deps));
  if (u.expert_params > 0 && expert_dp_size() > 1)
    ids.push_back(emit_collective(e, CollOp::kAllGather, GroupKind::kEdp, StreamKind::kDp,
                                  Category::kDpComm, u.expert_params * act_elem_bytes_, act_dtype_,
                                  phase, label_of("agx", u.name, tag, mb), u.layer, mb, chunk,
                                  deps));
  return ids;
}

double Lowerer::zero3_gathered_bytes(const Unit& u) const {
  return ((dense_dp_size() > 1 ? u.dense_params : 0) +
          (expert_dp_size() > 1 ? u.expert_params : 0)) *
         act_elem_bytes_;
}

void Lowerer::zero3_free(Emit& e, const Unit& u, std::string what, int mb, int chunk, Phase phase) {
  emit_mem(e, TaskKind::kFree, zero3_gathered_bytes(u), std::move(what), phase, u.layer, mb, chunk);
}

std::vector<std::string>* Lowerer::zero3_unsharded(RankState& rs, int chunk) const {
  if (par_.zero != 3 || z3_submodule() || rs.z3_unsharded.empty()) return nullptr;
  return &rs.z3_unsharded[static_cast<size_t>(chunk)];
}

// ZeRO-3 gathers around unit k of a pass (units run forward for F, reverse for B). With
// prefetch (overlap.param_gather) the next unit's gather is issued when this unit starts;
// without, each unit's gather waits for the previous unit's compute.
void Lowerer::zero3_issue(Emit& e, const std::vector<Unit>& units,
                          std::vector<std::vector<int>>& z3, int k, int mb, int c, Phase phase,
                          const char* tag, bool prefetch, bool reverse,
                          const std::vector<std::string>* unsharded) {
  const int n = static_cast<int>(units.size());
  const int first = reverse ? n - 1 : 0;
  const int step = reverse ? -1 : 1;
  std::vector<int> deps;
  if (e.last_compute >= 0) deps.push_back(e.last_compute);
  auto gather = [&](int i) {
    if (unsharded != nullptr && !(*unsharded)[static_cast<size_t>(i)].empty()) return;
    z3[static_cast<size_t>(i)] =
        zero3_gather(e, units[static_cast<size_t>(i)], mb, c, phase, tag, deps);
  };
  if (k == first || !prefetch) gather(k);
  const int nk = k + step;
  if (prefetch && nk >= 0 && nk < n) gather(nk);
}

void Lowerer::check_bucket_count(double params) const {
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

void Lowerer::grads_ready(Emit& e, Bucketer& b, const Unit& u, int chunk, bool flush) {
  b.dense += u.dense_grad_bytes;
  b.expert += u.expert_grad_bytes;
  const double cap = grad_bucket_bytes(e.coord.pp, chunk);
  auto issue = [&](double bytes, bool expert) {
    if ((expert ? expert_dp_size() : dense_dp_size()) <= 1) return;
    DeferredBucket d{bytes, expert, chunk, u.layer, e.last_compute};
    // DeepSpeed's engine reduces after the backward whatever the overlap
    // (FrameworkRules::dp_reduce_after_backward).
    if (par_.overlap_grad_reduce && !sc_.framework.dp_reduce_after_backward) {
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

void Lowerer::emit_bucket(Emit& e, const DeferredBucket& d) {
  std::vector<int> deps;
  if (d.after >= 0) deps.push_back(d.after);
  std::string label = d.expert ? "gradx.c" : "grad.c";
  append_int(label, d.chunk);
  label += ".b";
  append_int(label, bucket_count_++);
  if (sc_.framework.grad_nan_check && par_.zero <= 1) {
    // Megatron-Core's check_grads (FrameworkRules::grad_nan_check): the bucket's norm on the
    // compute stream where the bucket became ready, read on the host (Task::host_sync)
    // before the collective is launched.
    Task t = base_task(TaskKind::kMemoryBound, StreamKind::kCompute, Phase::kOther,
                       Category::kDpComm, d.layer, -1, d.chunk);
    t.what = "grad_norm_check";
    t.label = label + ".check";
    t.flops = 2 * d.bytes / dtype_bytes(grad_dtype_);
    t.bytes_read = d.bytes;
    t.host_sync = true;
    t.deps = std::move(deps);
    deps = {add(e, std::move(t))};
  }
  grad_sync_.push_back(emit_collective(
      e, par_.zero >= 1 ? sharded_grad_op() : CollOp::kAllReduce,
      d.expert ? GroupKind::kEdp : dense_dp_kind(), StreamKind::kDp, Category::kDpComm, d.bytes,
      grad_dtype_, Phase::kOther, std::move(label), d.layer, -1, d.chunk, std::move(deps)));
}

// ZeRO-1/2 parameter allgather buckets (Megatron distributed optimizer), in forward order,
// sized like the gradient buckets in elements (bucket_bytes / 4 fp32 grads -> bf16 params);
// DeepSpeed gathers one per flat group. With FP8 primary weights (fp8_param_gather) the fp8
// linears' weights are gathered in fp8, 1 byte a parameter (Megatron distrib_optimizer with
// fp8_param_gather). Returns per chunk and unit the collective its parameters arrive with.
std::vector<std::vector<std::vector<int>>> Lowerer::emit_param_gathers(Emit& e,
                                                                       std::vector<int> deps) {
  std::vector<std::vector<std::vector<int>>> ready(static_cast<size_t>(v_));
  // DeepSpeed gathers each whole flat group at once (zero12_gather_after_step).
  for (int c = 0; c < v_; ++c) {
    const double cap =
        sc_.framework.zero12_gather_after_step
            ? std::numeric_limits<double>::infinity()
            : grad_bucket_bytes(e.coord.pp, c) / grad_bytes_per_param_ * act_elem_bytes_;
    const auto& units = chunks_[static_cast<size_t>(vstage(c, e.coord.pp))];
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
      // (Dense units only: a MoE unit's fp8 GEMMs include expert weights.)
      const double fp8_elems = te_fp8() && sc_.framework.fp8_param_gather && u.expert_params <= 0
                                   ? fp8_weight_elems(u)
                                   : 0.0;
      const double add_b[2] = {u.dense_params * act_elem_bytes_ - fp8_elems * (act_elem_bytes_ - 1),
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

// A unit's weight gradients are done: sync them (ZeRO-2/3 every microbatch, else buckets in
// the last one) and free its saved activations (in the order the lowering always had). `first`: the
// chunk's first unit, whose backward ends the chunk's.
void Lowerer::finish_unit_grads(Emit& e, Bucketer& b, const Unit& u, int mb, int c, bool first,
                                bool last_mb) {
  if (par_.zero == 3 && !sc_.framework.zero3_reduce_every_microbatch) {
    // The unsharded gradients accumulate from the first microbatch's backward and are
    // reduce-scattered (into the allocation sharded_grads_ready makes) in the last.
    const double grads = u.dense_grad_bytes + u.expert_grad_bytes;
    const std::string acc = mem_what("zacc", u, 0);
    if (mb == 0 && !last_mb)
      emit_mem(e, TaskKind::kAlloc, grads, acc, Phase::kBwdWeight, u.layer, mb, c);
    if (last_mb) {
      // Handed on as the reduce-scatter's input: freed here and allocated again, dense and
      // expert apart, by sharded_grads_ready, the same bytes at the same point of the step.
      if (mb > 0) emit_mem(e, TaskKind::kFree, grads, acc, Phase::kBwdWeight, u.layer, mb, c);
      sharded_grads_ready(e, b, u, mb, c, first);
    }
    free_unit_activations(e, u, mb, c);
  } else if (par_.zero >= 2) {
    sharded_grads_ready(e, b, u, mb, c, first);
    free_unit_activations(e, u, mb, c);
  } else {
    // A deferred output-layer call holds its input and output gradient until the drain.
    if (output_wgrad_deferred(u, mb))
      emit_mem(e, TaskKind::kAlloc, deferred_wgrad_bytes(u), mem_what("dwo", u, mb),
               Phase::kBwdWeight, u.layer, mb, c);
    free_unit_activations(e, u, mb, c);
    // (Megatron's grad-ready hook still fires in the last microbatch's backward: the
    // deferred call returns a placeholder weight gradient.)
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
void Lowerer::sharded_grads_ready(Emit& e, Bucketer& b, const Unit& u, int mb, int c, bool flush) {
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
      if (zero3 && par_.overlap_grad_reduce) {
        // At most `limit` reduce-scatters still running when this one is issued: the
        // kernels from here on wait for the one `limit + 1` back (DeepSpeed's host blocks on
        // it, FSDP2's compute stream waits for it before the chunk-cat).
        const int limit = sc_.framework.zero3_max_inflight_reduces;
        const std::vector<int>& done = e.dp_reduces;
        if (limit >= 0 && done.size() > static_cast<size_t>(limit))
          e.host_waits.push_back(done[done.size() - 1 - static_cast<size_t>(limit)]);
      }
      if (zero3) deps = zero3_reduce_copy(e, u, rs_bytes, expert, mb, c, std::move(deps));
      if (zero3 && sc_.framework.list_collectives) {
        const int copy = emit_list_copy(e, rs_bytes, expert ? expert_dp_size() : dense_dp_size(),
                                        Phase::kBwdWeight,
                                        label_of(expert ? "rsxcopy" : "rscopy", u.name, "g", mb),
                                        u.layer, mb, c, std::move(deps));
        deps = {copy};
      }
      const int id = emit_collective(e, zero3 ? CollOp::kReduceScatter : sharded_grad_op(),
                                     expert ? GroupKind::kEdp : dense_dp_kind(), StreamKind::kDp,
                                     Category::kDpComm, rs_bytes, grad_dtype_, Phase::kBwdWeight,
                                     label_of(expert ? "rsx" : "rs", u.name, "g", mb), u.layer, mb,
                                     c, std::move(deps));
      grad_sync_.push_back(id);
      e.dp_reduces.push_back(id);
      if (!par_.overlap_grad_reduce) {
        e.pending.push_back(id);
      } else if (!zero3) {
        issued_here = id;
      }
      for (Bucketer::UnitGrads& h : held)
        emit_mem(e, TaskKind::kFree, h.bytes, std::move(h.what), Phase::kBwdWeight, h.layer, mb, c,
                 StreamKind::kDp, {id});
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
  // DeepSpeed's epilogue after every backward (stage_1_and_2.py and stage3.py
  // independent_gradient_partition_epilogue) synchronizes the device: the host launches
  // nothing more (the next microbatch's forward, the optimizer) until the reductions issued
  // are done. They run in order on the DP stream, so waiting for the last is waiting for all.
  if (flush && par_.overlap_grad_reduce && sc_.framework.sync_reduces_each_backward &&
      !e.dp_reduces.empty())
    e.host_waits.push_back(e.dp_reduces.back());
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
double Lowerer::zero2_bucket_bytes(double dense, double expert) const {
  if (par_.zero != 2) return 0;
  const double buffers = par_.overlap_grad_reduce ? 2 : 1;
  double bytes = 0;
  if (dense_dp_size() > 1)
    bytes += std::min(dense * grad_bytes_per_param_, buffers * grad_bucket_bytes());
  if (expert_dp_size() > 1)
    bytes += std::min(expert * grad_bytes_per_param_, buffers * grad_bucket_bytes());
  return bytes;
}

}  // namespace stepcast::lowering
