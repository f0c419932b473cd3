// Lowering (lowering.h): the pipeline's point-to-point messages as the training stack issues
// them. The recvs are emitted at the step's start (passes.cc, emit_pp_recvs) and the sends
// once the passes are done (emit_pp_sends), each on its stream in the order of the top of
// passes.cc. Here, besides the sends:
//  - Megatron-LM's scatter-gather (FrameworkRules::p2p_scatter_gather): a message travels as
//    1/tp slices and the receiver all-gathers it over the tensor group before use;
//  - blocking p2p (FrameworkRules::blocking_p2p_1f1b, blocking_p2p_interleaved,
//    deepspeed_pipe_engine): which call of the schedule's code carries each message
//    (schedule.h, blocking_p2p_calls, deepspeed_engine_p2p_calls), when its recvs are
//    posted, and what the host waits for before it queues the next pass. A stage's sends
//    then go in its own order, and each call's transfers start only after the previous
//    call's have ended; in the stacks' code every message received in a call
//    is used by the passes up to the next call, so the calls of neighbouring stages pair up
//    and none waits on a later one (checked over random plans with random durations,
//    tests/sim/lower/lower_p2p_test.cc).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "sim/lower/lowering.h"

namespace stepcast::lowering {

// Megatron-LM's scatter_gather_tensors_in_pipeline (megatron/p2p_communication.py
// _communicate): with tp > 1 and without sequence parallel (whose messages are already
// 1/tp of the activation), each tensor rank sends its 1/tp slice of the message.
bool Lowerer::p2p_scatter_gather() const {
  return sc_.framework.p2p_scatter_gather && par_.tp > 1 && !par_.sequence_parallel;
}

// The pass waits for its recv; with scatter-gather, for the all-gather of the received
// slices (mpu.gather_split_1d_tensor: _all_gather_base over the tensor group, issued by the
// host right after the p2p call and waited for on the compute stream), the whole message
// being the gathered output. Emitted where the pass starts: for the backward of an
// interleaved forward-backward pair, after the forward, where Megatron-LM gathers both
// messages of the call before it; the compute stream waits for each gather either way.
void Lowerer::take_pp_recv(Emit& e, const RankState& rs, const PassOp& op, size_t i) {
  const int recv = rs.recv_of[i];
  if (recv < 0) return;
  if (!p2p_scatter_gather()) {
    e.pending.push_back(recv);
    return;
  }
  const bool fwd = op.kind == PassKind::kF;
  const int vs = vstage(op.chunk, e.coord.pp);
  e.pending.push_back(emit_collective(
      e, CollOp::kAllGather, GroupKind::kTp, StreamKind::kTp, Category::kPpComm,
      rs.p2p_bytes * par_.tp, act_dtype_, fwd ? Phase::kFwd : Phase::kBwdInput,
      label_of("p2p_gather", fwd ? "act" : "grad", "vs" + std::to_string(vs), op.mb), -1, op.mb,
      op.chunk, {recv}));
}

// Pipeline sends, ordered by their consumers' start (see the top of passes.cc); with
// blocking p2p, in the stage's own order (each call's sends block what follows it).
void Lowerer::emit_pp_sends(Emit& e, RankState& rs) {
  const bool blocking = pp_blocking();
  std::stable_sort(rs.sends.begin(), rs.sends.end(), [&](const SendRec& a, const SendRec& b) {
    return blocking ? a.pass < b.pass : a.key < b.key;
  });
  std::vector<int> send_of(rs.recv_of.size(), -1);  // per pass: its send, or -1
  for (SendRec& r : rs.sends) {
    send_of[static_cast<size_t>(r.pass)] = static_cast<int>(e.rp.tasks.size());
    Task t = base_task(TaskKind::kSend, StreamKind::kPpSend,
                       r.key.dir == 0 ? Phase::kFwd : Phase::kBwdInput, Category::kPpComm, -1, r.mb,
                       r.chunk);
    t.peer = layout_.rank(e.coord.tp, e.coord.cp, e.coord.dp, r.to_stage);
    t.tag = pp_tag(r.key);
    t.bytes = rs.p2p_bytes;
    t.label = label_of("send", r.key.dir == 0 ? "act" : "grad",
                       "vs" + std::to_string(r.key.consumer_vs), r.mb);
    t.deps = std::move(r.deps);
    add(e, std::move(t));
  }
  rs.send_of = std::move(send_of);
}

// Blocking p2p: every call of the schedule's code is a batch_isend_irecv waited for with
// torch.cuda.synchronize() before the host goes on. Megatron-Core's non-interleaved 1F1B
// (FrameworkRules::blocking_p2p_1f1b; pipeline_parallel/schedules.py
// forward_backward_pipelining_without_interleaving with p2p_communication.py _communicate,
// batch_p2p_sync) and Megatron-LM 2020-22 in both schedules (blocking_p2p_interleaved;
// megatron/schedules.py, megatron/p2p_communication.py). The interleaved schedule of
// Megatron-Core posts its p2p asynchronously (overlap_p2p_comm) and is not blocking.
bool Lowerer::pp_blocking() const {
  if (p_ <= 1) return false;
  if (par_.schedule == Schedule::k1F1B)
    return sc_.framework.blocking_p2p_1f1b || sc_.framework.deepspeed_pipe_engine;
  if (par_.schedule == Schedule::kInterleaved) return sc_.framework.blocking_p2p_interleaved;
  return false;
}

// Per call after pass i (blocking_p2p_calls), with the sends of the passes since the last
// call and the recvs of the passes up to the next one:
//  - its sends leave only once the host reaches the call, after pass i's last kernel (a
//    steady-state interleaved forward's output thus waits for the backward after it);
//  - its recvs are posted then too, or once its sends are done when the schedule makes
//    a send call and then a recv call; when it makes a recv call and then a send call
//    (DeepSpeed's engine, F then B), its sends leave once its recvs are done;
//  - the next pass's first tasks, up to its first compute, wait for every send and recv of
//    the call (the host is blocked until they are done); after the last pass, the step's end
//    does (the gradient sync and the optimizer step; run once the whole program is
//    emitted).
void Lowerer::block_on_pp(Emit& e, const RankState& rs, const std::vector<PassOp>& order) {
  const std::vector<P2pCall> calls =
      sc_.framework.deepspeed_pipe_engine && par_.schedule == Schedule::k1F1B
          ? deepspeed_engine_p2p_calls(order, p_, e.coord.pp)
          : blocking_p2p_calls(par_.schedule, order, p_, m_);
  auto add_dep = [&](int task, int dep) {
    if (task < 0 || dep < 0) return;
    std::vector<int>& deps = e.rp.tasks.mut(static_cast<size_t>(task)).deps;
    if (std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
  };
  std::vector<int> sends, recvs;
  for (size_t i = 0; i < order.size(); ++i) {
    if (rs.send_of[i] >= 0) sends.push_back(rs.send_of[i]);
    if (calls[i] == P2pCall::kNone) continue;
    const int reached = rs.pass_last_compute[i];
    for (const int s : sends) add_dep(s, reached);
    recvs.clear();
    for (size_t j = i + 1; j < order.size(); ++j) {
      if (rs.recv_of[j] >= 0) recvs.push_back(rs.recv_of[j]);
      if (calls[j] != P2pCall::kNone) break;
    }
    const bool after_sends = calls[i] == P2pCall::kSendThenRecv && !sends.empty();
    for (const int r : recvs) {
      if (!after_sends) add_dep(r, reached);
      if (after_sends)
        for (const int s : sends) add_dep(r, s);
    }
    if (calls[i] == P2pCall::kRecvThenSend)
      for (const int s : sends)
        for (const int r : recvs) add_dep(s, r);
    for (size_t t = static_cast<size_t>(rs.pass_first[i + 1]); t < e.rp.tasks.size(); ++t) {
      const TaskKind kind = e.rp.tasks[t].kind;
      if (kind == TaskKind::kSend || kind == TaskKind::kRecv) continue;
      for (const int s : sends) add_dep(static_cast<int>(t), s);
      for (const int r : recvs) add_dep(static_cast<int>(t), r);
      if (kind == TaskKind::kGemm || kind == TaskKind::kAttention || kind == TaskKind::kMemoryBound)
        break;
    }
    sends.clear();
  }
}

}  // namespace stepcast::lowering
