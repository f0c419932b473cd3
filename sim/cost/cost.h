// Cost models: pure functions from a task (and the cluster) to a duration. The engine asks
// these; they know nothing of the engine. Checkable by hand.
#pragma once

#include <string>
#include <vector>

#include "model/units.h"
#include "sim/cluster/profile.h"
#include "sim/program/program.h"

namespace stepcast {

// Shape of a communicator as the network sees it.
struct GroupShape {
  int ranks = 1;           // n
  int nodes = 1;           // N (distinct nodes the ranks live on)
  int ranks_per_node = 1;  // ppn (max over nodes)
  int pods = 1;            // distinct pods (oversubscription applies when > 1)
  bool operator==(const GroupShape&) const = default;
};

GroupShape group_shape(const std::vector<int>& ranks, int gpus_per_node, int pod_gpus);

struct CollectiveChoice {
  double time_s = 0;
  CollAlgo algo = CollAlgo::kRing;
  CollProto proto = CollProto::kSimple;
  bool calibrated = false;  // came from a calibration table
};

// Compute: roofline with shape-dependent efficiency + launch overhead (sim/cost/compute.cc).
double compute_time_s(const Task& t, const HwProfile& hw);
double gemm_efficiency(const GemmShape& g, const HwProfile& hw);
// Kernel time of a grouped expert GEMM (GemmShape::batch = G groups of [m, n, k]) as
// Transformer Engine runs it — one cuBLAS GEMM per group at the dense curve (or gemm_table)
// of its own shape, over 4 streams — at the clock the curve was measured at, before
// compute.gemm.grouped_efficiency and without the launch (sim/cost/compute.cc). compute_time_s
// divides it by the sustained clock and the grouped efficiency; `stepcast fit` fits the
// latter against it.
double grouped_gemm_kernel_time_s(const GemmShape& g, const HwProfile& hw);
// A flash-attention kernel's fraction of the bf16 peak (sim/cost/compute.cc's curve; the
// sustained clock not applied). `stepcast fit` reports its attention residuals with it.
double attention_efficiency(const AttentionShape& a, const ComputeParams& c);

// Collectives: per algorithm and protocol, as NCCL composes them, cheapest chosen
// (sim/cost/collective.cc). `bytes` is S as nccl-tests counts it (see docs/model.md "Collectives
// and network"). `nccl` false: an all-to-all run by the MoE dispatcher's own kernels (DeepEP),
// which reach the NICs' ring rate (no kAllToAllNicShare) and no NCCL calibration entry describes.
CollectiveChoice collective_time(CollOp op, double bytes, const GroupShape& g, const HwProfile& hw,
                                 bool nccl = true);
// Every (algorithm, protocol) the model allows for this op and group, with its time for
// `bytes` (no calibration override); collective_time picks the cheapest. For tests/reports.
std::vector<CollectiveChoice> collective_candidates(CollOp op, double bytes, const GroupShape& g,
                                                    const HwProfile& hw, bool nccl = true);
// The algorithm the model runs for `op` on `g` once messages are large (the candidate with
// the highest bus bandwidth, ties to the lowest latency): a calibrated entry applies only
// when its algorithm is this one (collective.cc header). Needs a group of >= 2 ranks.
CollAlgo bandwidth_algorithm(CollOp op, const GroupShape& g, const HwProfile& hw);
// nccl-tests bus factor F (docs/model.md "Collectives and network"): busbw = S * F / t. 2(n-1)/n
// allreduce, (n-1)/n reduce-scatter / allgather / all-to-all, 1 broadcast; 0 for one rank.
double bus_factor_of(CollOp op, int ranks);
// Point-to-point send/recv of `bytes` between two ranks; `pair` is their shape
// (pair_shape): same node or not, same pod or not (oversubscription, fabric hops).
double p2p_time_s(double bytes, const GroupShape& pair, const HwProfile& hw);
GroupShape pair_shape(int a, int b, int gpus_per_node, int pod_gpus);
// Two ranks in one pod, in one node or in two.
GroupShape pair_shape(bool same_node);
inline double p2p_time_s(double bytes, bool same_node, const HwProfile& hw) {
  return p2p_time_s(bytes, pair_shape(same_node), hw);
}

const char* algo_name(CollAlgo a);
const char* proto_name(CollProto p);

}  // namespace stepcast
