// Pipeline schedules: the order in which each pipeline stage runs the forward (F), backward
// (B) and, for zero-bubble schedules, weight-gradient (W) passes of its model chunks over the
// microbatches. Pure functions of (schedule, p, v, m[, nominal costs]); no time, no model.
//
//  - GPipe (Huang et al. 2019): all forwards, then all backwards.
//  - 1F1B (Narayanan et al. 2021, PipeDream-Flush): stage s runs min(p-s-1, m) warm-up
//    forwards, then alternates one forward and one backward, then drains the backwards.
//  - Interleaved 1F1B (Narayanan et al. 2021, section 2.2; Megatron-LM
//    forward_backward_pipelining_with_interleaving): v chunks per stage, chunk c of stage s
//    is virtual stage c*p + s; microbatches advance in groups of p per chunk.
//  - ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3.1): B computes
//    input gradients only, W the weight gradients; stage s postpones its W passes by s
//    microbatches so that they fill 1F1B's cool-down bubbles: bubble (p-1)(T_F + T_B - T_W),
//    at most p microbatches in flight per stage (1F1B's stage-0 peak).
//  - DualPipeV (Sea AI Lab's "cut-in-half" DualPipe, DeepSeek-V3 paper section 3.2.1;
//    deepseek-ai/DualPipe dualpipe/dualpipev.py, DualPipeV.step): v == 2 chunks per stage in
//    a V, chunk 0 of stage s is virtual stage s, chunk 1 virtual stage 2p-1-s (stage 0 holds
//    the first and the last, stage p-1 the two middle ones). Its steady state runs a forward
//    of one chunk overlapped with a backward of the other (PassOp::paired); some backwards
//    defer their weight gradients to a later W (PassOp::defer_w; DualPipe's
//    WeightGradStore, a FIFO). Needs m >= 2p. Bubble (p-1)(F&B + B - 3W), at most 2p+1
//    chunk-microbatches in flight per stage (the DualPipe README's table: PP+1 over PP = 2p
//    stages).
//  - With the MoE all-to-all overlap (Megatron-Core --overlap-moe-expert-parallel-comm,
//    pipeline_parallel/schedules.py with combined_1f1b.py): 1F1B (pp 1) and interleaved
//    1F1B take one more warm-up forward, and every steady-state forward runs merged with the
//    backward that follows it in the order, layer by layer (PassOp::paired; the lowering
//    interleaves the two, sim/lower/moe_overlap.cc), so that one microbatch's expert
//    all-to-alls run beside the other's compute.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/plan/plan.h"

namespace stepcast {

enum class PassKind : std::uint8_t { kF, kB, kW };

struct PassOp {
  PassKind kind = PassKind::kF;
  int chunk = 0;  // model chunk on this stage (its virtual stage: virtual_stage below)
  int mb = 0;     // microbatch
  // Runs merged with the next pass of the order (a B): the pair starts when both inputs
  // are there and both passes end together (the MoE all-to-all overlap, above).
  bool paired = false;
  // A B whose weight gradients wait for a later W pass (ZB-H1's every B, some of
  // DualPipeV's); a B without it computes input and weight gradients.
  bool defer_w = false;
  bool operator==(const PassOp&) const = default;
};

// The virtual stage (the index of a model chunk in the model's order of layers) that chunk
// `chunk` of stage `stage` holds: chunk * p + stage (interleaved, and the one-chunk
// schedules), or the V of DualPipeV (stage for chunk 0, 2p-1-stage for chunk 1).
int virtual_stage(Schedule schedule, int chunk, int stage, int p);
// The stage that holds virtual stage vs (the inverse of virtual_stage).
int stage_of_virtual(Schedule schedule, int vs, int p);

// Relative cost of each pass per virtual stage (virtual_stage), used only to order
// pipeline messages (passes.cc). For schedules without a W pass, `b` is the whole backward
// and `w` may be empty; with W passes, `b` is the input gradients and a B without
// PassOp::defer_w costs b + w.
struct NominalCosts {
  std::vector<double> f, b, w;
};

// The per-stage pass orders of a schedule (index: stage). GPipe, 1F1B and ZB-H1 need
// v == 1; interleaved needs m % p == 0 (Megatron's requirement); DualPipeV v == 2, p >= 2 and
// m >= 2p. `ep_overlap` pairs the
// steady state's forwards and backwards (above): 1F1B with p == 1 or interleaved only.
std::vector<std::vector<PassOp>> pipeline_schedule(Schedule schedule, int p, int v, int m,
                                                   bool ep_overlap = false);

// Blocking pipeline p2p (FrameworkRules::blocking_p2p_1f1b, blocking_p2p_interleaved): what
// the schedule's code calls after each pass of a stage's order. A call carries the sends of
// the passes since the previous call and the recvs of the passes up to the next one, and
// the host waits for all of them (torch.cuda.synchronize) before it queues more work.
enum class P2pCall : std::uint8_t {
  kNone,          // no call: the pass's send waits for the next call
  kBatched,       // one batched call: its recvs posted with its sends, after the pass
  kSendThenRecv,  // a send call, then a recv call: the recvs posted once the sends are done
  kRecvThenSend,  // a recv call, then a send call: the sends leave once the recvs are done
};

// Per pass of `order` (a stage's order of `schedule`, 1F1B or interleaved, m microbatches
// over p stages), the call after it:
//  - 1F1B (Megatron schedules.py forward_backward_pipelining_without_interleaving): F then F
//    (warm-up send_forward; recv_forward) and B then B (cool-down) two calls, F then B
//    (send_forward_recv_backward) and B then F (send_backward_recv_forward) one.
//  - Interleaved (Megatron-LM schedules.py forward_backward_pipelining_with_interleaving):
//    one batched call after each warm-up F (send_forward_recv_forward, the last one also
//    receiving the first backward's gradient), none between the F and the B of a
//    steady-state pair, one after the pair's B (send_forward_backward_recv_forward_backward),
//    one after each cool-down B (send_backward_recv_backward). With m == p (all forwards
//    first) the F then B turn is send_forward_recv_forward, then recv_backward: two calls.
// The last pass is followed by one call (its send).
std::vector<P2pCall> blocking_p2p_calls(Schedule schedule, const std::vector<PassOp>& order, int p,
                                        int m);

// The same for DeepSpeed's PipelineEngine (FrameworkRules::deepspeed_pipe_engine; 1F1B
// only; deepspeed/runtime/pipe/schedule.py TrainSchedule) on `stage` of p: stage s runs F(i)
// in slot 2i + s and B(i) in slot 2i + 2p - s - 1, a forward slot sends the previous slot's
// gradient (SendGrad) and then receives (RecvActivation), a backward slot receives
// (RecvGrad) and then sends the previous slot's activation (SendActivation), each a
// blocking call of one message. So a forward followed by a backward in the very next slot
// (the steady state) receives first; every other turn sends first, the pass's output
// leaving in the next slot (empty when the turn skips slots) before the next pass's input
// is received.
std::vector<P2pCall> deepspeed_engine_p2p_calls(const std::vector<PassOp>& order, int p, int stage);

// Runs the orders with the nominal costs and instant communication (a pass starts when its
// stage is free and its input is ready: F after F of the previous virtual stage, B after B
// of the next one, or after the own F on the last virtual stage; W after its B; a paired F
// and the B after it as one pass of both costs, once both inputs are ready). Returns
// the start time of every pass, same indexing as `orders`. Throws InvariantError when the
// orders deadlock or are incomplete.
std::vector<std::vector<double>> nominal_start_times(Schedule schedule,
                                                     const std::vector<std::vector<PassOp>>& orders,
                                                     int p, int v, int m,
                                                     const NominalCosts& costs);

}  // namespace stepcast
