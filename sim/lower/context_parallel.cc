// Lowering (lowering.h): context-parallel attention, ring (KV blocks passed around the cp
// group, overlapped with attention chunks) or all-gather (K, V gathered before attention,
// dK, dV reduce-scattered after).
#include <cstdint>
#include <string>

#include "sim/lower/lowering.h"

namespace stepcast::lowering {

constexpr std::int64_t kCpTagBase = std::int64_t{1} << 40;

// Bytes of this rank's K and V for its s/cp tokens: b x (s/cp) x kv_heads/tp x (d_qk + d_v)
// x activation bytes (kv heads replicated when tp > kv_heads, as the model does).
double Lowerer::kv_block_bytes() const {
  const double kv_heads =
      arch_.kv_heads >= par_.tp ? static_cast<double>(arch_.kv_heads) / par_.tp : 1.0;
  return static_cast<double>(par_.microbatch) * static_cast<double>(shard_.seq_len / par_.cp) *
         kv_heads * static_cast<double>(arch_.dim_qk() + arch_.dim_per_head()) * act_elem_bytes_;
}

// Context-parallel attention in place of the model's single attention op.
// pass: 0 forward, 1 backward, 2 recompute.
void Lowerer::emit_cp_attention(Emit& e, const Op& op, Phase phase, Category cat,
                                const char* prefix, const Unit& u, int mb, int chunk, int pass) {
  const bool bwd = pass == 1;
  const int cp = par_.cp;
  const int ci = e.coord.cp;
  if (par_.cp_kind == CpKind::kAllGather) {
    // Llama 3 (Dubey et al. 2024, section 3.3.2): all-gather K and V over the cp group
    // before attention; in backward reduce-scatter dK, dV. S = the gathered size. Only the
    // local K, V are saved for the backward, which all-gathers them again before the
    // attention backward (Transformer Engine `pytorch/attention/dot_product_attention/
    // context_parallel.py (AttnFuncWithCPAndKVAllGather.backward)`, Megatron-Core's
    // cp_comm_type "all_gather").
    const double s_bytes = kv_block_bytes() * cp;
    std::vector<int> deps;
    if (e.last_compute >= 0) deps.push_back(e.last_compute);
    e.pending.push_back(emit_collective(e, CollOp::kAllGather, GroupKind::kCp, StreamKind::kCp,
                                        Category::kCpComm, s_bytes, act_dtype_, phase,
                                        label_of(prefix, u.name, "cp_ag", mb), u.layer, mb, chunk,
                                        std::move(deps)));
    emit_compute(e, op, phase, cat, prefix, u, mb, chunk);
    if (bwd) {
      e.pending.push_back(emit_collective(e, CollOp::kReduceScatter, GroupKind::kCp,
                                          StreamKind::kCp, Category::kCpComm, s_bytes, act_dtype_,
                                          phase, label_of(prefix, u.name, "cp_rs", mb), u.layer, mb,
                                          chunk, {e.last_compute}));
    }
    return;
  }
  // Ring attention (Liu et al. 2023; Megatron/TransformerEngine context parallel with
  // causal load balancing): the sequence is cut into 2*cp chunks, rank i holds chunks i
  // and 2cp-1-i (sl = s/cp tokens). Step 0 attends the own KV causally; step j > 0 the KV of
  // rank k = (i - j) mod cp: for k < i both query chunks against KV chunk k (sl x sl/2),
  // for k > i only the second query chunk against both KV chunks (sl/2 x sl) — equal work
  // on every step (see the shape note below). While step j computes, the KV block moves one hop
  // around the ring (send to i+1 on the cp stream, recv from i-1 on the tp stream: different
  // streams so that a folded rank can meet itself). Backward passes KV and dKV: twice the bytes.
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
      Task s =
          base_task(TaskKind::kSend, StreamKind::kCp, phase, Category::kCpComm, u.layer, mb, chunk);
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
      Task r = base_task(TaskKind::kRecv, StreamKind::kCpRecv, phase, Category::kCpComm, u.layer,
                         mb, chunk);
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

}  // namespace stepcast::lowering
