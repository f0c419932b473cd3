// Hardware profiles (hw_profiles/*.yaml) and the cluster a scenario runs on.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/workload.h"
#include "sim/cluster/params.h"

namespace stepcast {

struct GpuSpec {
  std::string name;
  double memory_bytes = 0;
  // Kept out of the training tensors' reach: the CUDA context, NCCL's buffers, the caching
  // allocator's fragmentation (YAML gpu.memory_reserved, default 0: not counted). Plans fit
  // when their peak fits in memory_bytes - memory_reserved_bytes.
  double memory_reserved_bytes = 0;
  double usable_memory_bytes() const { return memory_bytes - memory_reserved_bytes; }
  double hbm_bytes_per_s = 0;
  int sms = 0;
  std::map<DType, double> peak_flop_per_s;  // dense, per dtype (bf16 ... nvfp4, fp32)
  bool operator==(const GpuSpec&) const = default;
};

// A "node" is an NVLink domain: the GPUs that reach one another through NVSwitch at
// node.nvlink (8 on a DGX/HGX, 72 on a GB200/GB300 NVL72 rack). Every collective rule, the
// rank layout and the flow topology key on it. The host (the machine the GPUs sit in: 8 on
// a DGX, 4 on an NVL72 compute tray) is recorded apart, gpus_per_host, and nothing in the
// cost model depends on it: NICs are per GPU (node.nics per domain says how many), NVLink
// does not stop at the host, and nothing host-side (CPU offload, PCIe, host memory) is
// modelled (hw_profiles/README.md, "NVLink domain and host").
struct NodeSpec {
  int gpus = 8;           // GPUs per NVLink domain
  int gpus_per_host = 0;  // GPUs per host; 0: the domain is one host (gpus)
  int host_gpus() const { return gpus_per_host > 0 ? gpus_per_host : gpus; }
  double nvlink_bytes_per_s = 0;  // per direction per GPU (line rate)
  bool nvswitch = true;
  bool nvls = false;  // NVSwitch with multicast (Hopper+)
  int nics = 8;
  double nic_bytes_per_s = 0;  // per NIC per direction (line rate)
  bool operator==(const NodeSpec&) const = default;
};

struct FabricSpec {
  std::string topology = "rail-optimized";
  double oversubscription = 1.0;  // above a pod (1: full bisection)
  int pod_gpus = 0;               // 0: one pod
  // Per switch a transfer crosses between nodes (sim/cost/collective.cc fabric_hops), added
  // on top of NCCL's per-step network latency constants; optional, 0: those constants alone.
  double latency_s = 0;
  bool operator==(const FabricSpec&) const = default;
};

struct HwProfile {
  std::string name;
  std::string file;  // where it was loaded from
  GpuSpec gpu;
  NodeSpec node;
  FabricSpec fabric;
  ComputeParams compute;
  CollectiveParams collectives;
  // Not a profile key: how the cost model treats a NIC shared by several GPUs (node.nics <
  // node.gpus). false (analytical mode): a symmetric plan runs the collectives and pipeline
  // sends of every GPU of a node at once, so each GPU gets nics/gpus of a NIC. true (flow
  // mode, sim/report/flow_mode.h flow_cost_profile): the cost of one transfer alone on the
  // links, each GPU with a whole NIC; the flows sharing the NIC add the rest.
  bool lone_transfers = false;
  bool operator==(const HwProfile&) const = default;
};

// How fast one GPU runs against its profile (scenario cluster.stragglers; docs/model.md,
// Engine: "slow one GPU or one link"): fractions of nominal speed in (0, 1].
//   compute  every kernel on the GPU (GEMM, attention, memory-bound): time / compute;
//   nic      its NIC's bandwidth: the bandwidth part of the transfers it makes across nodes;
//   nvlink   its NVLink bandwidth: the bandwidth part of its transfers inside its node.
struct GpuSpeed {
  double compute = 1, nic = 1, nvlink = 1;
  bool nominal() const { return compute == 1 && nic == 1 && nvlink == 1; }
  bool operator==(const GpuSpeed&) const = default;
};
// Per global rank; empty when every GPU runs as its profile says.
using GpuSpeeds = std::vector<GpuSpeed>;

// Loads a profile by name (a file in `profiles_dir`, without .yaml) or by path, applies
// `overrides` (a YAML mapping of dotted paths -> values, validated like the file itself;
// an unknown path is an error) and validates everything. Throws InputError listing every
// problem. `overrides_file` names the scenario file for messages about overrides.
HwProfile load_profile(const std::string& name_or_path, const std::string& profiles_dir,
                       const YAML::Node& overrides = YAML::Node(),
                       const std::string& overrides_file = "");

// After overrides: scales the measured figures of `prof` (busbw, calibrated collectives,
// GEMM table points) by the ratio of its line rates / peaks to those of `base` (the file
// without overrides), for each figure the overrides did not set themselves.
void scale_measured_to_overrides(const HwProfile& base, HwProfile& prof);

std::vector<std::string> builtin_profile_names(const std::string& profiles_dir);

// The file a profile name or path refers to: a value containing '/' or ending in ".yaml"
// is a path; anything else is `profiles_dir/<name>.yaml`. Returns "" when no such file.
std::string resolve_profile_path(const std::string& name_or_path, const std::string& profiles_dir);

// Validates a profile document already in memory (what load_profile does after reading the
// file and applying overrides); `file` names it in messages. Adds every problem to `r`.
HwProfile parse_profile(YamlReader& r, const YAML::Node& root);

// The directory holding the shipped profiles: $STEPCAST_PROFILES if set, else the
// compiled-in source path (hw_profiles/).
std::string default_profiles_dir();

}  // namespace stepcast
