// Bus bandwidth, defined once for the cost model, the flow model, the fitter and the GPU
// benchmark: nccl-tests' convention (doc/PERFORMANCE.md of NVIDIA/nccl-tests), busbw =
// algbw x F = S / t x F, with S the buffer size as nccl-tests counts it (the full buffer of
// an all-reduce, the gathered size of an all-gather or reduce-scatter, the bytes a rank
// sends in an all-to-all) and F the share of S each rank's link carries:
//   all-reduce 2(n-1)/n; reduce-scatter, all-gather, all-to-all (n-1)/n;
//   broadcast, reduce, send/recv 1.
// Header-only and free of dependencies, so the GPU programs (calibrate/bench) use it too.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace stepcast {

enum class BusOp : std::uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
  kBroadcast,
  kSendRecv
};

// F of nccl-tests for `n` ranks (n >= 1).
constexpr double busbw_factor(BusOp op, int n) {
  const double nn = n;
  switch (op) {
    case BusOp::kAllReduce: return 2.0 * (nn - 1) / nn;
    case BusOp::kReduceScatter:
    case BusOp::kAllGather:
    case BusOp::kAllToAll: return (nn - 1) / nn;
    case BusOp::kBroadcast:
    case BusOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

// The op of an nccl-tests / stepcast measurement name: "allreduce", "reduce_scatter",
// "allgather", "all_to_all", "broadcast", "send_recv"; nullopt for any other.
constexpr std::optional<BusOp> bus_op_named(std::string_view name) {
  if (name == "allreduce") return BusOp::kAllReduce;
  if (name == "reduce_scatter") return BusOp::kReduceScatter;
  if (name == "allgather") return BusOp::kAllGather;
  if (name == "all_to_all") return BusOp::kAllToAll;
  if (name == "broadcast") return BusOp::kBroadcast;
  if (name == "send_recv") return BusOp::kSendRecv;
  return std::nullopt;
}

}  // namespace stepcast
