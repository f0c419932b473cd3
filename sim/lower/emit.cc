// Lowering (lowering.h): emission of tasks on a rank's program: labels, compute tasks,
// collectives, memory events (alloc / free) and the steps of a unit's pass.
#include <charconv>
#include <cstring>

#include "sim/lower/lowering.h"

namespace stepcast::lowering {

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

// A task's label (make_label), or none when the caller keeps no labels
// (LowerOptions::labels).
std::string Lowerer::label_of(const char* prefix, const std::string& unit, const std::string& op,
                              int mb) const {
  return opt_.labels ? make_label(prefix, unit, op, mb) : std::string();
}

Task Lowerer::base_task(TaskKind kind, StreamKind stream, Phase phase, Category cat, int layer,
                        int mb, int chunk) const {
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

int Lowerer::emit_compute(Emit& e, const Op& op, Phase phase, Category cat, const char* prefix,
                          const Unit& u, int mb, int chunk, std::vector<int> extra_deps) {
  return emit_compute_as(e, op, phase, cat, label_of(prefix, u.name, op.name, mb), u, mb, chunk,
                         std::move(extra_deps));
}

int Lowerer::emit_compute_as(Emit& e, const Op& op, Phase phase, Category cat, std::string label,
                             const Unit& u, int mb, int chunk, std::vector<int> extra_deps) {
  Task t = base_task(op.kind == OpKind::kGemm        ? TaskKind::kGemm
                     : op.kind == OpKind::kAttention ? TaskKind::kAttention
                                                     : TaskKind::kMemoryBound,
                     StreamKind::kCompute, phase, cat, u.layer, mb, chunk);
  t.label = std::move(label);
  if (op.kind == OpKind::kGemm) t.gemm = op.gemm;
  if (op.kind == OpKind::kAttention) t.attn = op.attn;
  // What a memory-bound kernel does ("ln1", "act", "softmax_ce", ...): the executor and
  // the trace tell them apart by it.
  if (op.kind == OpKind::kMemoryBound) t.what = op.name;
  t.flops = op.flops;
  t.launches = op.launches;
  t.host_sync = op.host_sync;
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

int Lowerer::emit_collective(Emit& e, CollOp op, GroupKind gk, StreamKind stream, Category cat,
                             double bytes, DType dtype, Phase phase, std::string label, int layer,
                             int mb, int chunk, std::vector<int> deps, bool ep_kernels) {
  Task t = base_task(TaskKind::kCollective, stream, phase, cat, layer, mb, chunk);
  t.coll = op;
  t.ep_kernels = ep_kernels;
  t.group = group_of(gk, e.rank);
  t.bytes = bytes;
  t.dtype = dtype;
  t.label = std::move(label);
  t.deps = std::move(deps);
  return add(e, std::move(t));
}

void Lowerer::emit_mem(Emit& e, TaskKind kind, double bytes, std::string what, Phase phase,
                       int layer, int mb, int chunk, StreamKind stream, std::vector<int> deps) {
  if (bytes <= 0) return;
  Task t = base_task(kind, stream, phase, Category::kCompute, layer, mb, chunk);
  t.bytes = bytes;
  if (opt_.labels) t.label = (kind == TaskKind::kAlloc ? "alloc." : "free.") + what;
  t.what = std::move(what);
  t.deps = std::move(deps);
  add(e, std::move(t));
}

void Lowerer::emit_steps(Emit& e, std::span<const Step> steps, Phase phase, Category cat,
                         const char* prefix, const Unit& u, int mb, int chunk, int pass,
                         bool selective_only) {
  // A deferred output-layer call leaves its weight gradient and the input's re-gather for
  // it to the drain (emit_output_wgrad_drain).
  const bool deferred = phase != Phase::kFwd && output_wgrad_deferred(u, mb);
  for (const Step& st : steps) {
    if (selective_only && !st.recompute_selective) continue;
    if (deferred && (phase == Phase::kBwdWeight || (st.is_comm && !st.comm.feeds_wgrad.empty())))
      continue;
    if (st.beside_comm != e.beside) {
      // A run of steps on their own stream beside the communication issued before it (the
      // MoE shared experts' overlap): that communication waits for the step after the run.
      if (st.beside_comm) {
        e.held_comm.swap(e.pending);
      } else {
        e.pending.insert(e.pending.end(), e.held_comm.begin(), e.held_comm.end());
        e.held_comm.clear();
      }
      e.beside = st.beside_comm;
    }
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

std::string Lowerer::mem_what(const char* prefix, const Unit& u, int mb) {
  std::string s(prefix);
  s.push_back('.');
  s.append(u.name);
  s.append(".mb");
  append_int(s, mb);
  return s;
}

}  // namespace stepcast::lowering
