// The presets of sim/plan/framework.h. Each rule's value is what the stack's code does
// (versions: DeepSpeed 0.16, Megatron-LM / Megatron-Core main of 2025, PyTorch FSDP2 with
// TorchTitan); docs/frameworks.md lists every preset and rule with its source.
#include "sim/plan/framework.h"

namespace stepcast {

FrameworkRules framework_preset(Framework f) {
  FrameworkRules r;
  r.name = f;
  switch (f) {
    case Framework::kMegatronCore:
      // Megatron-FSDP (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py): a unit is a
      // TransformerLayer, all-gathered at once; prefetched one unit ahead (stepcast's
      // reading of its prefetch budget, megatron_fsdp.py), gathered once for recompute and
      // backward.
      break;
    case Framework::kMegatronLm:
    case Framework::kMegatronDeepSpeed:
      // No ZeRO-3 of their own (Megatron-LM 2020-22 has none; Megatron-DeepSpeed's ZeRO is
      // DeepSpeed's, and its ZeRO-3 rules are the deepspeed preset's).
      break;
    case Framework::kDeepSpeed:
      // deepspeed/runtime/zero/partitioned_param_coordinator.py (fetch_sub_module): hooks on
      // every nn.Module fetch its direct parameters; stage3_prefetch_bucket_size 5e7,
      // stage3_param_persistence_threshold 1e5, stage3_max_reuse_distance 1e9
      // (zero/config.py DeepSpeedZeroConfig); __max_ongoing_fetch_events = 2.
      r.zero3_gather = GatherUnit::kSubmodule;
      r.zero3_prefetch_elements = 5e7;
      r.zero3_persistence_elements = 1e5;
      r.zero3_reuse_distance_elements = 1e9;
      r.zero3_max_inflight_fetches = 2;
      break;
    case Framework::kFsdp2:
      // torch/distributed/fsdp/_fully_shard: one FSDPParamGroup per fully_shard call
      // (TorchTitan: per transformer block), implicit prefetch of the next group.
      break;
  }
  return r;
}

namespace {
struct Named {
  Framework f;
  const char* name;
};
constexpr Named kNames[] = {{Framework::kMegatronCore, "megatron-core"},
                            {Framework::kMegatronLm, "megatron-lm"},
                            {Framework::kMegatronDeepSpeed, "megatron-deepspeed"},
                            {Framework::kDeepSpeed, "deepspeed"},
                            {Framework::kFsdp2, "fsdp2"}};
}  // namespace

const char* framework_name(Framework f) {
  for (const Named& n : kNames)
    if (n.f == f) return n.name;
  return "?";
}

const std::vector<std::string>& framework_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Named& n : kNames) v.emplace_back(n.name);
    return v;
  }();
  return names;
}

bool framework_from_name(const std::string& name, Framework& out) {
  for (const Named& n : kNames)
    if (name == n.name) {
      out = n.f;
      return true;
    }
  return false;
}

const char* gather_unit_name(GatherUnit g) {
  return g == GatherUnit::kSubmodule ? "submodule" : "block";
}

}  // namespace stepcast
