// Cluster network topology for the flow mode (docs/model.md "Collectives and network", "Topology
// facts"): nodes with an NVSwitch domain, NICs per node on rails, a rail-optimised
// leaf/spine fabric grouped in pods, and an oversubscribed layer above the pods.
//
// Links are directed (full duplex: the two directions never contend) and carry a capacity
// in bytes/s (line rates from the profile's node spec):
//   nvl_up(g), nvl_down(g)     GPU g <-> its node's NVSwitch, node.nvlink_bytes_per_s
//   nic_up(n,r), nic_down(n,r) NIC r of node n <-> rail-r leaf of its pod, node.nic_bytes_per_s
//   leaf_up(p,r), leaf_down(p,r)  rail-r leaf of pod p <-> spine: full bisection inside a
//                               pod, capacity = nodes in pod * nic rate
//   pod_up(p), pod_down(p)     pod p <-> the layer above pods: pod NIC bandwidth /
//                               fabric.oversubscription (e.g. Llama 3: 1:7)
// GPU g sits on node g / gpus_per_node; its NIC (rail) is local_index * nics / gpus.
// Pods hold fabric.pod_gpus GPUs (0: the whole cluster is one pod).
#pragma once

#include <string>
#include <vector>

#include "sim/cluster/profile.h"

namespace stepcast {

enum class LinkKind { kNvlUp, kNvlDown, kNicUp, kNicDown, kLeafUp, kLeafDown, kPodUp, kPodDown };
const char* link_kind_name(LinkKind k);

struct Link {
  int id = 0;
  LinkKind kind = LinkKind::kNvlUp;
  int index = 0;  // GPU (nvl), node*nics+rail (nic), pod*nics+rail (leaf), pod (pod)
  double capacity_bytes_per_s = 0;
  std::string name;  // "nic_up[n3.r5]"
};

class Topology {
 public:
  // `gpus` GPUs in nodes of hw.node.gpus (the last node may be partial).
  Topology(const HwProfile& hw, int gpus);

  int gpus() const { return gpus_; }
  int gpus_per_node() const { return gpus_per_node_; }
  int nodes() const { return nodes_; }
  int nics_per_node() const { return nics_; }
  int pods() const { return pods_; }
  int node_of(int gpu) const { return gpu / gpus_per_node_; }
  int pod_of(int gpu) const { return node_of(gpu) / nodes_per_pod_; }
  int rail_of(int gpu) const { return (gpu % gpus_per_node_) * nics_ / gpus_per_node_; }

  const std::vector<Link>& links() const { return links_; }
  std::vector<double> capacities() const;
  // A degraded link (a straggler's NIC or NVLink port): capacity x factor, factor in (0, 1].
  void scale_capacity(int link, double factor);

  int nvl_up(int gpu) const { return nvl_base_ + 2 * gpu; }
  int nvl_down(int gpu) const { return nvl_base_ + 2 * gpu + 1; }
  int nic_up(int node, int rail) const { return nic_base_ + 2 * (node * nics_ + rail); }
  int nic_down(int node, int rail) const { return nic_up(node, rail) + 1; }
  int leaf_up(int pod, int rail) const { return leaf_base_ + 2 * (pod * nics_ + rail); }
  int leaf_down(int pod, int rail) const { return leaf_up(pod, rail) + 1; }
  int pod_up(int pod) const { return pod_base_ + 2 * pod; }
  int pod_down(int pod) const { return pod_up(pod) + 1; }

  // Links a flow from src_gpu to dst_gpu crosses, in order (empty when src == dst).
  // Same node: NVLink up + down. Across nodes with PXN (NCCL's default): if the rails
  // differ, first an NVLink hop to the source node's GPU on the destination's rail, then
  // that rail's NIC, leaf, (pod up/down when pods differ, through the spine: leaf up/down),
  // destination NIC. Without PXN a cross-rail flow leaves on its own rail and crosses the
  // spine (leaf up, leaf down).
  std::vector<int> route(int src_gpu, int dst_gpu, bool pxn = true) const;

 private:
  int add(LinkKind k, int index, double cap, const std::string& name);
  int gpus_, gpus_per_node_, nics_, nodes_, nodes_per_pod_, pods_;
  int nvl_base_ = 0, nic_base_ = 0, leaf_base_ = 0, pod_base_ = 0;
  std::vector<Link> links_;
};

}  // namespace stepcast
