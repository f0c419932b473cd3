// The `framework:` section (sim/plan/framework.h): a preset name, or a mapping with `name`
// (the preset, default megatron-core) and any of the preset's rules overridden. Unknown
// names and rules are errors with the closest known one suggested.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "sim/io/yaml_util.h"
#include "sim/scenario/loader.h"

namespace stepcast::detail {

namespace {

const std::vector<std::string> kFrameworkKeys = {"name",
                                                 "zero3_gather",
                                                 "zero3_prefetch_elements",
                                                 "zero3_persistence_elements",
                                                 "zero3_reuse_distance_elements",
                                                 "zero3_max_inflight_fetches",
                                                 "list_collectives",
                                                 "zero3_fetch_sync",
                                                 "zero3_copies",
                                                 "zero3_max_inflight_reduces",
                                                 "zero3_reshard_after_forward",
                                                 "zero3_reshard_after_backward",
                                                 "zero3_reduce_every_microbatch",
                                                 "zero3_fp32_shards",
                                                 "sync_reduces_each_backward",
                                                 "dp_reduce_after_backward",
                                                 "zero12_all_reduce",
                                                 "zero12_gather_after_step",
                                                 "grad_bucket_elements",
                                                 "buckets_first_chunk_only",
                                                 "zero_levels",
                                                 "tp_comm_overlap",
                                                 "pipeline_max_zero",
                                                 "async_tp_dgrad_reduce",
                                                 "blocking_p2p_1f1b",
                                                 "blocking_p2p_interleaved",
                                                 "deepspeed_pipe_engine",
                                                 "p2p_scatter_gather",
                                                 "te_fp8_storage",
                                                 "fp8_param_gather",
                                                 "fused_cross_entropy",
                                                 "defer_embedding_wgrad_compute",
                                                 "wgrad_deferral_limit",
                                                 "fused_optimizer",
                                                 "grad_accumulation_fusion",
                                                 "master_weight_remainders",
                                                 "host_launch_us",
                                                 "host_op_us",
                                                 "loss_nan_check",
                                                 "grad_nan_check"};

// A count of elements: up to 1e15 (far past any model), -1 only where `negative_ok`.
constexpr double kMaxElements = 1e15;

}  // namespace

void Loader::parse_framework(const YAML::Node& f, FrameworkRules& out) {
  const std::string p = "framework";
  auto preset = [&](const YAML::Node& at, const std::string& path) {
    Framework which{};
    const std::string name = at.Scalar();
    if (framework_from_name(name, which)) {
      out = framework_preset(which);
      return;
    }
    std::string list;
    for (const auto& n : framework_names()) list += (list.empty() ? "" : ", ") + n;
    const std::string hint = closest_match(name, framework_names());
    r_.error(at, path,
             fmt::format("unknown framework \"{}\" (known: {}){}", name, list,
                         hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint)));
  };
  if (f.IsScalar()) {
    preset(f, p);
    return;
  }
  if (!f.IsMap()) {
    r_.error(f, p,
             "expected a framework name (megatron-core, megatron-lm, megatron-deepspeed, "
             "deepspeed, fsdp2) or a mapping {name: NAME, RULE: VALUE, ...}");
    return;
  }
  if (!r_.expect_map(f, p, kFrameworkKeys)) return;
  if (const YAML::Node n = f["name"]) {
    if (n.IsScalar())
      preset(n, "framework.name");
    else
      r_.error(n, "framework.name", "expected a framework name, got " + show_node(n));
  }
  if (auto v = r_.get_enum(f, p, "zero3_gather", {"block", "submodule"}))
    out.zero3_gather = *v == "submodule" ? GatherUnit::kSubmodule : GatherUnit::kBlock;
  if (auto v = r_.get_double(f, p, "zero3_prefetch_elements", 0, kMaxElements))
    out.zero3_prefetch_elements = *v;
  if (auto v = r_.get_double(f, p, "zero3_persistence_elements", 0, kMaxElements))
    out.zero3_persistence_elements = *v;
  // A number in [lo, hi] that `ok` also accepts; else `expected`, with the value, at its key.
  auto number_if = [&](const char* key, double lo, double hi, bool (*ok)(double),
                       const char* expected) -> std::optional<double> {
    const auto v = r_.get_double(f, p, key, lo, hi);
    if (!v || ok(*v)) return v;
    r_.error(f[key], std::string("framework.") + key, fmt::format("{}, got {}", expected, *v));
    return std::nullopt;
  };
  if (auto v = number_if(
          "zero3_reuse_distance_elements", -1, kMaxElements,
          [](double x) { return x >= 0 || x == -1; },
          "expected a number of elements >= 0, or -1 (never released between recompute and "
          "backward)"))
    out.zero3_reuse_distance_elements = *v;
  if (auto v = r_.get_int(f, p, "zero3_max_inflight_fetches", 0, 1 << 20))
    out.zero3_max_inflight_fetches = static_cast<int>(*v);
  if (auto v = r_.get_bool(f, p, "list_collectives")) out.list_collectives = *v;
  if (auto v = r_.get_bool(f, p, "zero3_fetch_sync")) out.zero3_fetch_sync = *v;
  if (auto v = r_.get_enum(f, p, "zero3_copies", {"none", "deepspeed", "fsdp2"}))
    out.zero3_copies = *v == "deepspeed" ? Zero3Copies::kDeepSpeed
                       : *v == "fsdp2"   ? Zero3Copies::kFsdp2
                                         : Zero3Copies::kNone;
  if (auto v = r_.get_int(f, p, "zero3_max_inflight_reduces", -1, 1 << 20))
    out.zero3_max_inflight_reduces = static_cast<int>(*v);
  if (auto v = r_.get_bool(f, p, "zero3_reshard_after_forward"))
    out.zero3_reshard_after_forward = *v;
  if (auto v = r_.get_bool(f, p, "zero3_reshard_after_backward"))
    out.zero3_reshard_after_backward = *v;
  if (auto v = r_.get_bool(f, p, "zero3_reduce_every_microbatch"))
    out.zero3_reduce_every_microbatch = *v;
  if (auto v = r_.get_bool(f, p, "zero3_fp32_shards")) out.zero3_fp32_shards = *v;
  if (auto v = r_.get_bool(f, p, "sync_reduces_each_backward")) out.sync_reduces_each_backward = *v;
  if (auto v = r_.get_bool(f, p, "dp_reduce_after_backward")) out.dp_reduce_after_backward = *v;
  if (auto v = r_.get_bool(f, p, "zero12_all_reduce")) out.zero12_all_reduce = *v;
  if (auto v = r_.get_bool(f, p, "zero12_gather_after_step")) out.zero12_gather_after_step = *v;
  if (auto v = r_.get_bool(f, p, "buckets_first_chunk_only")) out.buckets_first_chunk_only = *v;
  if (const YAML::Node z = f["zero_levels"]) parse_zero_levels(z, out);
  if (auto v = r_.get_bool(f, p, "tp_comm_overlap")) out.tp_comm_overlap = *v;
  if (auto v = r_.get_int(f, p, "pipeline_max_zero", 0, 3))
    out.pipeline_max_zero = static_cast<int>(*v);
  // A bucket of at least 1e5 elements: smaller ones would be thousands of collectives a
  // stage (kMaxBucketsPerStage bounds them anyway).
  if (auto v = number_if(
          "grad_bucket_elements", 0, kMaxElements, [](double x) { return x == 0 || x >= 1e5; },
          "expected 0 (Megatron-Core's bucket rule) or at least 1e5 elements"))
    out.grad_bucket_elements = *v;
  if (auto v = r_.get_bool(f, p, "async_tp_dgrad_reduce")) out.async_tp_dgrad_reduce = *v;
  if (auto v = r_.get_bool(f, p, "blocking_p2p_1f1b")) out.blocking_p2p_1f1b = *v;
  if (auto v = r_.get_bool(f, p, "blocking_p2p_interleaved")) out.blocking_p2p_interleaved = *v;
  if (auto v = r_.get_bool(f, p, "deepspeed_pipe_engine")) out.deepspeed_pipe_engine = *v;
  if (auto v = r_.get_bool(f, p, "p2p_scatter_gather")) out.p2p_scatter_gather = *v;
  if (auto v = r_.get_bool(f, p, "te_fp8_storage")) out.te_fp8_storage = *v;
  if (auto v = r_.get_bool(f, p, "fp8_param_gather")) out.fp8_param_gather = *v;
  if (auto v = r_.get_bool(f, p, "fused_cross_entropy")) out.fused_cross_entropy = *v;
  if (auto v = r_.get_bool(f, p, "defer_embedding_wgrad_compute"))
    out.defer_embedding_wgrad_compute = *v;
  // Megatron's wgrad_deferral_limit: microbatches deferred, 0 for all of them.
  if (auto v = r_.get_int(f, p, "wgrad_deferral_limit", 0, 1 << 20))
    out.wgrad_deferral_limit = static_cast<int>(*v);
  if (auto v = r_.get_bool(f, p, "fused_optimizer")) out.fused_optimizer = *v;
  if (auto v = r_.get_bool(f, p, "grad_accumulation_fusion")) out.grad_accumulation_fusion = *v;
  if (auto v = r_.get_bool(f, p, "master_weight_remainders")) out.master_weight_remainders = *v;
  // Up to 1 ms a launch: far beyond any measured host (5-20 us).
  if (auto v = r_.get_double(f, p, "host_launch_us", 0, 1000)) out.host_launch_us = *v;
  if (auto v = r_.get_double(f, p, "host_op_us", 0, 1000)) out.host_op_us = *v;
  if (auto v = r_.get_bool(f, p, "loss_nan_check")) out.loss_nan_check = *v;
  if (auto v = r_.get_bool(f, p, "grad_nan_check")) out.grad_nan_check = *v;
  // DeepSpeed's engine exchanges by blocking dist.send / dist.recv: its rule cannot stand
  // beside asynchronous 1F1B p2p (the presets never pair them; the scenario's own setting did).
  if (out.deepspeed_pipe_engine && !out.blocking_p2p_1f1b) {
    const char* key = f["blocking_p2p_1f1b"] ? "blocking_p2p_1f1b" : "deepspeed_pipe_engine";
    r_.error(f[key], std::string("framework.") + key,
             "deepspeed_pipe_engine (DeepSpeed's pipeline engine, whose sends and receives "
             "block: deepspeed/runtime/pipe/p2p.py) needs blocking_p2p_1f1b: true; set "
             "deepspeed_pipe_engine: false for asynchronous 1F1B p2p");
  }
}

// `zero_levels: [0, 3]`: a non-empty list of distinct levels 0-3, each checked at its own
// position ("framework.zero_levels[i]").
void Loader::parse_zero_levels(const YAML::Node& z, FrameworkRules& out) {
  const std::string kp = "framework.zero_levels";
  if (!z.IsSequence() || z.size() == 0) {
    r_.error(z, kp, "expected a non-empty list of zero levels (0-3), e.g. [0, 3]");
    return;
  }
  std::array<bool, 4> levels{};
  bool ok = true;
  for (size_t i = 0; i < z.size(); ++i) {
    YAML::Node one(YAML::NodeType::Map);
    const std::string key = fmt::format("zero_levels[{}]", i);
    one[key] = z[i];
    const auto v = r_.get_int(one, "framework", key, 0, 3);
    if (!v) {
      ok = false;
    } else if (levels[static_cast<size_t>(*v)]) {
      r_.error(z[i], "framework." + key, fmt::format("duplicate level {}", *v));
      ok = false;
    } else {
      levels[static_cast<size_t>(*v)] = true;
    }
  }
  if (ok) out.zero_levels = levels;
}

}  // namespace stepcast::detail
