// Collective cost model (cost.h): per (algorithm, protocol) latency + bandwidth terms
// composed as NCCL's tuner does (NVIDIA/nccl src/graph/tuning.cc; constants as tabulated in
// docs/model.md "Collectives and network", NCCL 2.18-2.21 era), cheapest chosen:
//
//   t = lat[algo][proto] + S * F / (busbw[algo] * proto_factor[proto])
//
// with S and F the nccl-tests conventions (docs/model.md "Collectives and network" "Metric
// conventions"), so busbw is what all_reduce_perf & co. print and the profile's measured busbw
// values plug in as is.
//
// Latency (us), ppn ranks per node, N nodes, n ranks:
//   Ring:      base + (steps - interSteps) * nvlinkHop + interSteps * netHop,
//              steps = 2(n-1) allreduce, n-1 otherwise; interSteps = 2(N-1) or N-1.
//   Tree:      base + 2[(ppn-1) * nvlinkHop + log2(N) * netHop]        (allreduce only)
//   NVLS:      nvlinkHop(25)                                           (one node, allreduce)
//   NVLS-Tree: nvlinkHop(25) + 2 log2(N) * netHop(20.9)                (multi-node allreduce)
//   PAT:       base + log2(n) * netHop        (RS/AG, one rank per node, NCCL >= 2.23)
// Bandwidth (bus, per rank):
//   intra  = collectives.intra_ring_busbw (measured one-node ring busbw); with two ranks
//            in the node at most collectives.p2p_intra_bw (each ring step is a send/recv
//            between the same two GPUs)
//   inter  = collectives.nic_busbw * NICs used / oversubscription (when the group spans
//            pods). NICs used = min(nics per node, ppn * nics/gpus): full-node groups
//            aggregate every NIC, one-rank-per-node groups use one NIC per GPU. With fewer
//            NICs than GPUs, nics/gpus < 1: in a symmetric plan every GPU of a node runs its
//            collective (or pipeline send) at the same time, so a NIC shared by k GPUs gives
//            each 1/k (one NIC per 8 GPUs: a DP ring gets 1/8 of it). HwProfile::
//            lone_transfers (flow mode) keeps a whole NIC per GPU: its flows share the NIC.
//   Ring/Tree/PAT over several nodes: hierarchical, pipelined (docs/model.md "Collectives and
//   network" "Hierarchical
//            allreduce"): the slowest phase sets the rate, busbw = min(intra, inter).
//            Measured 2x8 A100 HDR allreduce 188 GB/s = min(232, 8 x 24) -> 192.
//   Tree   x 0.92 (NCCL's tree allreduce factor).
//   NVLS   = nvls_busbw * (1 - (8 - n)/24) for 5 <= n <= 8 GPUs of the NVLink domain in the
//            group (no gain at <= 4): reproduces 420/440/460/480 GB/s at 5/6/7/8 H100s (nccl
//            issue 1455) and 414/436/460/473 on H200 (stas00 table) within 2%; nvls_busbw is
//            the 8-GPU figure. Above 8 (an NVL72 domain, NCCL's NVLS over the multi-node
//            NVLink fabric): NVLS reduces in the switch (multimem.ld_reduce) and multicasts
//            the result (multimem.st), so each GPU sends and receives about S whatever n:
//            algbw stays at its 8-GPU value and busbw = algbw x 2(n-1)/n, i.e. nvls_busbw x
//            (2(n-1)/n) / (2 x 7/8): x1.071 at 16 GPUs, x1.127 at 72. No measurement above 8
//            GPUs here: a derivation. Only allreduce: with NVLS allowed, 8xH200 allgather /
//            reduce-scatter still run Ring (same table).
//   NVLS-Tree = min(NVLS(ppn), inter).
//   Protocol factor: LL 0.5, LL128 0.92 (=120/128), Simple 1.
// All-to-all (runs as grouped send/recv; no tuner entry): uniform traffic, g = ppn,
//   t = lat + max(S (g-1)/n / intra, S (n-g)/n / (nic_busbw x a2a x share / oversub))
//   (docs/model.md "Collectives and network", MoE): never aggregates NICs (share = min(1,
//   nics/gpus), above); lat = one ring step of the slowest hop crossed (base + hop).
//   a2a = kAllToAllNicShare: NCCL's all-to-all reaches less of a NIC than its rings do. It
//   runs as n-1 send/recv pairs per rank, each peer on its own few p2p channels
//   (NCCL_NCHANNELS_PER_NET_PEER), with every NIC receiving from all remote ranks at once
//   (incast). Measured 2 x 8 A100 with 8 HDR NICs a node (NCCL 2.17, mscclpp NDmv4 table):
//   37.8 GB/s busbw, where a NIC at the ring's 24 GB/s would give (15/16)/(8/16)/24 = 45;
//   37.8/45 = 0.84 of nic_busbw. No H100 multi-node all-to-all measurement is here: the same
//   share is taken for every NIC.
// Send/recv (pipeline): one hop, LL or Simple; across nodes nic_busbw x share / oversub
//   (oversubscription when the two ranks are in different pods, as for collectives).
// Fabric latency (fabric.latency, per switch): every inter-node step adds the switches it
//   crosses (fabric_hops: 1, the rail's leaf, inside a pod, with PXN every step runs rail to
//   rail; 5 across pods: leaf, spine, core, spine, leaf), x the steps in sequence: ring
//   interSteps, tree and NVLS-Tree 2 log2(N), PAT log2(n), all-to-all and send/recv 1. A
//   ring or tree step ends with its slowest edge, so a group spanning pods pays 5 per step.
// Broadcast: ring, F = 1.
// collectives.launch_overhead_s is added to every modelled (not calibrated) time.
// Calibrated entries (CollectiveParams::calibrated) with the same op, ranks and nodes,
// min_size <= S <= max_size (max 0: unbounded) and the algorithm the model picks for this
// collective under the current profile replace the model: t = latency + S*F/busbw; the
// first such entry wins. The pick (bandwidth_algorithm) is the candidate with the highest
// bus bandwidth, ties to the lowest latency: what NCCL runs once messages are large, and
// one algorithm per collective and group whatever the size, as measured with NCCL's own
// choice (small sizes run LL protocols of the same algorithm or are latency-bound fits of
// it). send_recv and all_to_all: direct. So an entry measured with NVLS no longer applies
// once the profile turns NVLS off or makes it slower than Ring: the model then runs Ring
// and a Ring entry (or the model itself) answers (docs/calibration.md: calibration per algorithm
// and group shape). Not modelled: Tree's size-dependent bandwidth correction, the x1.4 multi-node
// Simple ring latency step, CollNet/SHARP, channel-count effects on small messages.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "model/error.h"
#include "sim/cost/cost.h"

namespace stepcast {
namespace {

// Share of collectives.nic_busbw NCCL's all-to-all reaches across nodes (header: measured
// 2 x 8 A100 HDR, 37.8 GB/s busbw against 45 at the full per-NIC rate).
constexpr double kAllToAllNicShare = 37.8 / 45.0;

constexpr double kUs = 1e-6;
enum Proto { kLL = 0, kLL128 = 1, kSimple = 2 };
constexpr std::array<CollProto, 3> kProtos = {CollProto::kLL, CollProto::kLL128,
                                              CollProto::kSimple};

// docs/model.md "Collectives and network" latency table (us).
constexpr double kBaseTree[3] = {6.8, 14.0, 8.4};
constexpr double kBaseRing[3] = {6.6, 14.0, 8.4};
constexpr double kNvlinkTree[3] = {0.6, 1.25, 4.0};
constexpr double kNvlinkRing[3] = {0.6, 1.9, 3.4};
constexpr double kNetTree[3] = {5.0, 8.5, 14.0};
constexpr double kNetRing[3] = {2.7, 4.0, 14.0};
constexpr double kNvlsNvlink = 25.0;  // (network NVLS 18 us needs SHARP: not modelled)
constexpr double kNvlsTreeNvlink = 25.0, kNvlsTreeNet = 20.9;
constexpr double kProtoFactor[3] = {0.5, 0.92, 1.0};
constexpr double kTreeFactor = 0.92;
constexpr int kNvlsMinRanks = 5;  // "no gain at <= 4 GPUs" (nccl issue 1455)
// collectives.nvls_busbw is the busbw of an NVLS allreduce over 8 GPUs of a domain, the size
// every published NVLS measurement has (DGX/HGX H100, H200).
constexpr int kNvlsRefRanks = 8;

double bus_factor(CollOp op, int n) { return busbw_factor(bus_op_of(op), n); }

// NCCL version "2.21.5" -> 2021 (major*1000 + minor); unparsable -> 0.
int version_code(const std::string& v) {
  int major = 0, minor = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) < 1) return 0;
  return major * 1000 + minor;
}

double intra_busbw(const HwProfile& hw) {
  const double b = hw.collectives.intra_ring_busbw;
  return b > 0 ? b : hw.node.nvlink_bytes_per_s;
}

double nic_busbw(const HwProfile& hw) {
  const double b = hw.collectives.nic_busbw;
  return b > 0 ? b : hw.node.nic_bytes_per_s;
}

double oversub(const GroupShape& g, const HwProfile& hw) {
  return g.pods > 1 ? std::max(1.0, hw.fabric.oversubscription) : 1.0;
}

// NICs per GPU (above): nics/gpus, at least 1 for a transfer costed alone.
double nics_per_gpu(const HwProfile& hw) {
  const int gpus = std::max(1, hw.node.gpus);
  const int nics = std::max(1, hw.node.nics);
  const double per_gpu = static_cast<double>(nics) / gpus;
  return hw.lone_transfers ? std::max(1.0, per_gpu) : per_gpu;
}

double nics_used(const GroupShape& g, const HwProfile& hw) {
  return std::min<double>(std::max(1, hw.node.nics), g.ranks_per_node * nics_per_gpu(hw));
}

double inter_busbw(const GroupShape& g, const HwProfile& hw) {
  return nic_busbw(hw) * nics_used(g, hw) / oversub(g, hw);
}

// One GPU's own cross-node bandwidth (all-to-all, send/recv): never more than one NIC.
double gpu_nic_busbw(const GroupShape& g, const HwProfile& hw) {
  return nic_busbw(hw) * std::min(1.0, nics_per_gpu(hw)) / oversub(g, hw);
}

// Switches one inter-node step crosses (header): 0 inside a node.
int fabric_hops(const GroupShape& g) {
  if (g.nodes <= 1) return 0;
  return g.pods > 1 ? 5 : 1;
}

bool nvls_available(const GroupShape& g, const HwProfile& hw) {
  return hw.node.nvls && hw.collectives.nvls_busbw > 0 && g.ranks_per_node >= kNvlsMinRanks;
}

double nvls_busbw(int ppn, const HwProfile& hw) {
  const double ref = kNvlsRefRanks, n = ppn;
  if (n <= ref) return hw.collectives.nvls_busbw * (1.0 - (ref - n) / (3.0 * ref));
  // Beyond 8: algbw held, busbw x 2(n-1)/n against 2 x 7/8 (header).
  return hw.collectives.nvls_busbw * (2.0 * (n - 1) / n) / (2.0 * (ref - 1) / ref);
}

struct Candidate {
  CollAlgo algo;
  CollProto proto;
  double latency_s;
  double busbw;  // bytes/s, nccl-tests bus bandwidth
};

void consider(std::vector<CollectiveChoice>& out, const Candidate& c, double bytes, double factor) {
  if (!(c.busbw > 0)) return;
  CollectiveChoice ch;
  ch.time_s = c.latency_s + bytes * factor / c.busbw;
  ch.algo = c.algo;
  ch.proto = c.proto;
  out.push_back(ch);
}

const CollectiveCalib* find_calib(const std::string& op, int ranks, int nodes, double bytes,
                                  CollAlgo algo, const HwProfile& hw) {
  for (const CollectiveCalib& c : hw.collectives.calibrated) {
    if (c.op != op || c.ranks != ranks || c.nodes != nodes || c.algo != algo) continue;
    if (bytes < c.min_bytes || (c.max_bytes > 0 && bytes > c.max_bytes)) continue;
    if (c.busbw_bytes_per_s <= 0) continue;
    return &c;
  }
  return nullptr;
}

}  // namespace

const char* algo_name(CollAlgo a) {
  const auto& names = collective_algorithm_names();
  const auto i = static_cast<std::size_t>(a);
  return i < names.size() ? names[i].c_str() : "?";
}

const char* proto_name(CollProto p) {
  switch (p) {
    case CollProto::kLL: return "LL";
    case CollProto::kLL128: return "LL128";
    case CollProto::kSimple: return "Simple";
  }
  return "?";
}

GroupShape group_shape(const std::vector<int>& ranks, int gpus_per_node, int pod_gpus) {
  STEPCAST_CHECK(gpus_per_node > 0, "gpus_per_node must be positive");
  GroupShape g;
  g.ranks = static_cast<int>(ranks.size());
  if (ranks.empty()) return g;
  std::vector<int> nodes;
  std::set<int> pods;
  nodes.reserve(ranks.size());
  for (int r : ranks) {
    STEPCAST_CHECK(r >= 0, "negative rank in group");
    nodes.push_back(r / gpus_per_node);
    pods.insert(pod_gpus > 0 ? r / pod_gpus : 0);
  }
  std::sort(nodes.begin(), nodes.end());
  int distinct = 0, run = 0, max_run = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i == 0 || nodes[i] != nodes[i - 1]) {
      ++distinct;
      run = 0;
    }
    max_run = std::max(max_run, ++run);
  }
  g.nodes = distinct;
  g.ranks_per_node = max_run;
  g.pods = static_cast<int>(pods.size());
  return g;
}

std::vector<CollectiveChoice> collective_candidates(CollOp op, double bytes, const GroupShape& g,
                                                    const HwProfile& hw, bool nccl) {
  STEPCAST_CHECK(bytes >= 0, "collective bytes must be >= 0");
  STEPCAST_CHECK(g.ranks >= 1 && g.nodes >= 1 && g.ranks_per_node >= 1, "bad group shape");
  std::vector<CollectiveChoice> best;
  if (g.ranks <= 1) return best;
  const int n = g.ranks, nn = g.nodes, ppn = g.ranks_per_node;
  const double factor = bus_factor(op, n);
  const bool multi = nn > 1;
  double intra = intra_busbw(hw);
  // Two ranks in a node: every ring step is a send/recv between the same two GPUs, so the
  // measured send/recv rate bounds it (A100: 195 GB/s sendrecv_perf against 230 for an
  // 8-GPU ring; XLA's sm_90 table has 2-GPU rings at 0.6-0.8 of 8-GPU ones).
  if (ppn == 2 && hw.collectives.p2p_intra_bw > 0)
    intra = std::min(intra, hw.collectives.p2p_intra_bw);
  const double inter = multi ? inter_busbw(g, hw) : std::numeric_limits<double>::infinity();
  const double hop_s = fabric_hops(g) * hw.fabric.latency_s;  // per inter-node step
  const double flat = std::min(ppn > 1 ? intra : std::numeric_limits<double>::infinity(), inter);
  const double log2_nodes = std::log2(static_cast<double>(nn));

  if (op == CollOp::kAllToAll) {
    // Uniform all-to-all: the NVLink and NIC parts run concurrently; t as in docs/model.md
    // "Collectives and network". Expressed as a busbw for S*(n-1)/n: busbw = (n-1)/n / max(a, b).
    const double a = static_cast<double>(ppn - 1) / n / intra;
    const double b = multi ? static_cast<double>(n - ppn) / n /
                                 (gpu_nic_busbw(g, hw) * (nccl ? kAllToAllNicShare : 1.0))
                           : 0.0;
    const double per_byte = std::max(a, b);
    for (int p = 0; p < 3; ++p) {
      const double hop = multi ? kNetRing[p] : kNvlinkRing[p];
      consider(best,
               {CollAlgo::kDirect, kProtos[p], (kBaseRing[p] + hop) * kUs + hop_s,
                kProtoFactor[p] * factor / per_byte},
               bytes, factor);
    }
    return best;
  }

  const bool allreduce = op == CollOp::kAllReduce;
  const int steps = allreduce ? 2 * (n - 1) : n - 1;
  const int inter_steps = allreduce ? 2 * (nn - 1) : nn - 1;
  for (int p = 0; p < 3; ++p) {
    // Ring: every op.
    const double ring_lat =
        kBaseRing[p] + (steps - inter_steps) * kNvlinkRing[p] + inter_steps * kNetRing[p];
    consider(
        best,
        {CollAlgo::kRing, kProtos[p], ring_lat * kUs + inter_steps * hop_s, flat * kProtoFactor[p]},
        bytes, factor);
    // Tree: allreduce only.
    if (allreduce) {
      const double tree_lat =
          kBaseTree[p] + 2.0 * ((ppn - 1) * kNvlinkTree[p] + log2_nodes * kNetTree[p]);
      consider(best,
               {CollAlgo::kTree, kProtos[p], tree_lat * kUs + 2.0 * log2_nodes * hop_s,
                flat * kTreeFactor * kProtoFactor[p]},
               bytes, factor);
    }
  }
  // NVLS / NVLS-Tree: Simple protocol only, allreduce only.
  if (allreduce && nvls_available(g, hw)) {
    const double nvls = nvls_busbw(ppn, hw);
    if (!multi) {
      consider(best, {CollAlgo::kNvls, CollProto::kSimple, kNvlsNvlink * kUs, nvls}, bytes, factor);
    } else {
      consider(
          best,
          {CollAlgo::kNvlsTree, CollProto::kSimple,
           (kNvlsTreeNvlink + 2.0 * log2_nodes * kNvlsTreeNet) * kUs + 2.0 * log2_nodes * hop_s,
           std::min(nvls, inter)},
          bytes, factor);
    }
  }
  // PAT: reduce-scatter / allgather with one rank per node (NCCL >= 2.23), Simple.
  if ((op == CollOp::kReduceScatter || op == CollOp::kAllGather) && multi && ppn == 1 &&
      version_code(hw.collectives.nccl_version) >= 2023) {
    consider(best,
             {CollAlgo::kPat, CollProto::kSimple,
              (kBaseRing[kSimple] + std::log2(static_cast<double>(n)) * kNetRing[kSimple]) * kUs +
                  std::log2(static_cast<double>(n)) * hop_s,
              flat},
             bytes, factor);
  }
  return best;
}

CollAlgo bandwidth_algorithm(CollOp op, const GroupShape& g, const HwProfile& hw) {
  // Candidates come in the same order at any size: latency at 0 bytes, slope from 1 GB.
  const std::vector<CollectiveChoice> lat = collective_candidates(op, 0, g, hw);
  const std::vector<CollectiveChoice> big = collective_candidates(op, 1e9, g, hw);
  STEPCAST_CHECK(!lat.empty() && lat.size() == big.size(),
                 "no collective algorithm has positive bandwidth (profile '" + hw.name + "')");
  std::size_t best = 0;
  for (std::size_t i = 1; i < lat.size(); ++i) {
    const double slope = big[i].time_s - lat[i].time_s;
    const double best_slope = big[best].time_s - lat[best].time_s;
    if (slope < best_slope * (1 - 1e-12) ||
        (slope <= best_slope * (1 + 1e-12) && lat[i].time_s < lat[best].time_s))
      best = i;
  }
  return lat[best].algo;
}

CollectiveChoice collective_time(CollOp op, double bytes, const GroupShape& g, const HwProfile& hw,
                                 bool nccl) {
  CollectiveChoice best;
  if (g.ranks <= 1) return best;  // a one-rank communicator moves nothing
  // A measurement of the algorithm the model runs replaces the model (header).
  if (nccl && !hw.collectives.calibrated.empty()) {
    const CollAlgo algo = bandwidth_algorithm(op, g, hw);
    if (const CollectiveCalib* c =
            find_calib(coll_op_name(op), g.ranks, g.nodes, bytes, algo, hw)) {
      best.time_s = c->latency_s + bytes * bus_factor(op, g.ranks) / c->busbw_bytes_per_s;
      best.algo = algo;
      best.calibrated = true;
      return best;
    }
  }
  best.time_s = std::numeric_limits<double>::infinity();
  for (const CollectiveChoice& c : collective_candidates(op, bytes, g, hw, nccl))
    if (c.time_s < best.time_s) best = c;
  STEPCAST_CHECK(std::isfinite(best.time_s),
                 "no collective algorithm has positive bandwidth (profile '" + hw.name + "')");
  best.time_s += hw.collectives.launch_overhead_s;
  return best;
}

double bus_factor_of(CollOp op, int ranks) { return ranks <= 1 ? 0.0 : bus_factor(op, ranks); }

GroupShape pair_shape(int a, int b, int gpus_per_node, int pod_gpus) {
  return group_shape({a, b}, gpus_per_node, pod_gpus);
}

GroupShape pair_shape(bool same_node) {
  GroupShape g;
  g.ranks = 2;
  g.nodes = same_node ? 1 : 2;
  g.ranks_per_node = same_node ? 2 : 1;
  return g;
}

double p2p_time_s(double bytes, const GroupShape& pair, const HwProfile& hw) {
  STEPCAST_CHECK(bytes >= 0, "send/recv bytes must be >= 0");
  STEPCAST_CHECK(pair.ranks == 2 && pair.nodes >= 1 && pair.nodes <= 2, "bad send/recv shape");
  const bool same_node = pair.nodes == 1;
  if (const CollectiveCalib* c =
          find_calib("send_recv", 2, pair.nodes, bytes, CollAlgo::kDirect, hw))
    return c->latency_s + bytes / c->busbw_bytes_per_s;
  double bw = same_node ? hw.collectives.p2p_intra_bw : gpu_nic_busbw(pair, hw);
  if (!(bw > 0))
    bw = same_node ? intra_busbw(hw)
                   : hw.node.nic_bytes_per_s * std::min(1.0, nics_per_gpu(hw)) / oversub(pair, hw);
  STEPCAST_CHECK(bw > 0, "no send/recv bandwidth in profile '" + hw.name + "'");
  // NCCL p2p runs LL for small and Simple for large messages; one hop.
  double best = std::numeric_limits<double>::infinity();
  for (int p : {kLL, kSimple}) {
    const double lat = kBaseRing[p] + (same_node ? kNvlinkRing[p] : kNetRing[p]);
    best = std::min(best, lat * kUs + bytes / (bw * kProtoFactor[p]));
  }
  return best + fabric_hops(pair) * hw.fabric.latency_s + hw.collectives.launch_overhead_s;
}

}  // namespace stepcast
