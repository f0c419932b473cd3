// The sections of a scenario, each read and checked on its own: model (and model.moe),
// cluster (profile, size, stragglers), training and parallel (docs/scenarios.md;
// the rules are listed at the top of scenario.cc). Members of the Loader (loader.h).
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "sim/io/yaml_util.h"
#include "sim/scenario/loader.h"

namespace stepcast::detail {

namespace {

constexpr std::int64_t kMaxI64 = std::int64_t{1} << 50;
constexpr std::int64_t kMaxLayers = 100000;
// The least fraction of nominal speed a straggler may have (parse_stragglers).
constexpr double kMinStragglerSpeed = 0.01;

const std::vector<std::string> kModelKeys = {"name",
                                             "layers",
                                             "hidden",
                                             "ffn_hidden",
                                             "heads",
                                             "kv_heads",
                                             "vocab",
                                             "activation",
                                             "norm",
                                             "tied_embeddings",
                                             "head_dim",
                                             "max_positions",
                                             "moe",
                                             "dropout",
                                             "qk_head_dim",
                                             "qkv_features",
                                             "linear_bias",
                                             "qk_norm",
                                             "attention_sinks",
                                             "window",
                                             "window_every",
                                             "mtp_layers",
                                             "q_lora_rank",
                                             "kv_lora_rank",
                                             "qk_rope_head_dim"};
const std::vector<std::string> kMoeKeys = {"experts",
                                           "top_k",
                                           "ffn_hidden",
                                           "every",
                                           "capacity_factor",
                                           "shared_experts",
                                           "first_dense_layers",
                                           "imbalance",
                                           "router_groups",
                                           "router_group_topk"};
const std::vector<std::string> kClusterKeys = {"profile", "nodes", "gpus", "overrides",
                                               "stragglers"};
const std::vector<std::string> kStragglerKeys = {"gpu", "node", "compute", "nic", "nvlink"};
const std::vector<std::string> kTrainingKeys = {"seq_len",   "global_batch",      "dtype",
                                                "optimizer", "grad_reduce_dtype", "fp8_recipe"};
const std::vector<std::string> kParallelKeys = {"tp",
                                                "pp",
                                                "dp",
                                                "cp",
                                                "ep",
                                                "vpp",
                                                "microbatch",
                                                "pipeline_layers",
                                                "schedule",
                                                "zero",
                                                "sequence_parallel",
                                                "recompute",
                                                "overlap",
                                                "bucket_mb",
                                                "cp_kind",
                                                "expert_tp",
                                                "moe_dispatcher"};
const std::vector<std::string> kOverlapKeys = {"grad_reduce", "param_gather", "tp_comm",
                                               "moe_shared_experts", "moe_ep_comm"};

std::string join_list(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

// ---- model -------------------------------------------------------------------------
bool Loader::parse_model(const YAML::Node& m, ModelArch& out) {
  if (m.IsScalar()) {
    const std::string name = m.Scalar();
    if (const ModelArch* a = find_builtin_model(name)) {
      out = *a;
      return true;
    }
    auto known = builtin_model_names();
    std::string hint = closest_match(name, known);
    r_.error(m, "model",
             fmt::format("unknown model \"{}\" (built-in: {}){}; or give the model inline as "
                         "a mapping (layers, hidden, ...)",
                         name, join_list(known),
                         hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint)));
    return false;
  }
  if (!m.IsMap()) {
    r_.error(m, "model", "expected a built-in model name or a mapping (layers, hidden, ...)");
    return false;
  }
  const std::string p = "model";
  const std::size_t before = issues_.issues().size();
  r_.expect_map(m, p, kModelKeys);
  bool ok = true;
  for (const char* key : {"layers", "hidden", "ffn_hidden", "heads", "vocab"})
    ok = r_.require(m, p, key) && ok;
  out.name = r_.get_string(m, p, "name").value_or("custom");
  auto layers = r_.get_int(m, p, "layers", 1, kMaxLayers);
  auto hidden = r_.get_int(m, p, "hidden", 1, kMaxI64);
  auto ffn = r_.get_int(m, p, "ffn_hidden", 1, kMaxI64);
  auto heads = r_.get_int(m, p, "heads", 1, 1 << 20);
  auto kv = r_.get_int(m, p, "kv_heads", 1, 1 << 20);
  auto vocab = r_.get_int(m, p, "vocab", 1, kMaxI64);
  auto head_dim = r_.get_int(m, p, "head_dim", 1, kMaxI64);
  auto max_pos = r_.get_int(m, p, "max_positions", 0, kMaxI64);
  auto act = r_.get_enum(m, p, "activation", {"gelu", "swiglu"});
  auto norm = r_.get_enum(m, p, "norm", {"layernorm", "rmsnorm"});
  auto tied = r_.get_bool(m, p, "tied_embeddings");
  auto dropout = r_.get_bool(m, p, "dropout");
  auto qk_head_dim = r_.get_int(m, p, "qk_head_dim", 1, kMaxI64);
  auto qkv_features = r_.get_int(m, p, "qkv_features", 1, kMaxI64);
  if (layers) out.layers = static_cast<int>(*layers);
  if (hidden) out.hidden = *hidden;
  if (ffn) out.ffn_hidden = *ffn;
  if (heads) out.heads = static_cast<int>(*heads);
  out.kv_heads = static_cast<int>(kv.value_or(heads.value_or(0)));
  if (vocab) out.vocab = *vocab;
  if (head_dim) out.head_dim = *head_dim;
  if (max_pos) out.max_positions = *max_pos;
  if (act) out.activation = *act == "swiglu" ? Activation::kSwiglu : Activation::kGelu;
  if (norm) out.norm = *norm == "rmsnorm" ? Norm::kRmsNorm : Norm::kLayerNorm;
  if (tied) out.tied_embeddings = *tied;
  if (dropout) out.dropout = *dropout;
  if (qk_head_dim) out.qk_head_dim = *qk_head_dim;
  if (qkv_features) out.qkv_features = *qkv_features;
  if (auto v = r_.get_int(m, p, "q_lora_rank", 1, kMaxI64)) out.q_lora_rank = *v;
  if (auto v = r_.get_int(m, p, "kv_lora_rank", 1, kMaxI64)) out.kv_lora_rank = *v;
  if (auto v = r_.get_int(m, p, "qk_rope_head_dim", 1, kMaxI64)) out.qk_rope_head_dim = *v;
  if (auto v = r_.get_bool(m, p, "linear_bias")) out.linear_bias = *v;
  if (auto v = r_.get_bool(m, p, "qk_norm")) out.qk_norm = *v;
  if (auto v = r_.get_bool(m, p, "attention_sinks")) out.attention_sinks = *v;
  if (auto v = r_.get_int(m, p, "window", 0, kMaxI64)) out.window = *v;
  if (auto v = r_.get_int(m, p, "window_every", 1, kMaxLayers))
    out.window_every = static_cast<int>(*v);
  if (auto v = r_.get_int(m, p, "mtp_layers", 0, kMaxLayers)) out.mtp_layers = static_cast<int>(*v);
  // Grouped-query attention: each KV head serves heads/kv_heads query heads.
  if (heads && kv && *kv > *heads)
    r_.error(m["kv_heads"], join_path(p, "kv_heads"),
             fmt::format("expected at most heads ({}) KV heads, got {}", *heads, *kv));
  else if (heads && kv && *heads % *kv != 0)
    r_.error(m["kv_heads"], join_path(p, "kv_heads"),
             fmt::format("heads ({}) must be a multiple of kv_heads ({})", *heads, *kv));
  check_mla(m, out);
  // Without an explicit head_dim, head_dim = hidden / heads must be exact.
  if (!m["head_dim"] && hidden && heads && *hidden % *heads != 0)
    r_.error(m["heads"], join_path(p, "heads"),
             fmt::format("hidden ({}) must be divisible by heads ({}) unless head_dim is given",
                         *hidden, *heads));
  if (const YAML::Node moe = m["moe"]) parse_moe(moe, out, layers);
  return ok && issues_.issues().size() == before;
}

// Multi-head latent attention keys (model/arch.h): kv_lora_rank turns MLA on and needs
// qk_rope_head_dim and a qk_head_dim above it (nope + rope, as the HF config's
// qk_nope_head_dim + qk_rope_head_dim); q_lora_rank and qk_rope_head_dim need it; MLA has
// one key/value head per query head and cannot go with the fused-QKV approximation.
void Loader::check_mla(const YAML::Node& m, const ModelArch& out) {
  if (!m["kv_lora_rank"] && !m["q_lora_rank"] && !m["qk_rope_head_dim"]) return;
  const char* key = nullptr;
  std::string why;
  if (!m["kv_lora_rank"]) {
    key = m["q_lora_rank"] ? "q_lora_rank" : "qk_rope_head_dim";
    why = "needs kv_lora_rank (multi-head latent attention)";
  } else if (out.kv_lora_rank == 0) {
    return;  // its range was reported
  } else if (!m["qk_rope_head_dim"]) {
    key = "kv_lora_rank";
    why = "multi-head latent attention needs qk_rope_head_dim";
  } else if (out.qk_rope_head_dim > 0 && out.heads > 0 && out.dim_qk() <= out.qk_rope_head_dim) {
    key = m["qk_head_dim"] ? "qk_head_dim" : "qk_rope_head_dim";
    why = fmt::format(
        "multi-head latent attention needs qk_head_dim (nope + rope) above "
        "qk_rope_head_dim ({}), got {}",
        out.qk_rope_head_dim, out.dim_qk());
  } else if (m["qkv_features"]) {
    key = "qkv_features";
    why = "the fused-QKV approximation cannot go with kv_lora_rank (multi-head latent attention)";
  } else if (m["kv_heads"] && out.kv_heads != out.heads) {
    key = "kv_heads";
    why = fmt::format(
        "multi-head latent attention has one key/value head per query head ({}), "
        "got {}",
        out.heads, out.kv_heads);
  }
  if (key != nullptr) r_.error(m[key], join_path("model", key), why);
}

void Loader::parse_moe(const YAML::Node& moe, ModelArch& out, std::optional<std::int64_t> layers) {
  const std::string p = "model.moe";
  if (!r_.expect_map(moe, p, kMoeKeys)) return;
  for (const char* key : {"experts", "top_k", "ffn_hidden"}) r_.require(moe, p, key);
  MoeSpec s;
  auto experts = r_.get_int(moe, p, "experts", 1, 1 << 20);
  auto top_k = r_.get_int(moe, p, "top_k", 1, 1 << 20);
  auto ffn = r_.get_int(moe, p, "ffn_hidden", 1, kMaxI64);
  auto every = r_.get_int(moe, p, "every", 1, 100000);
  auto cf = r_.get_double(moe, p, "capacity_factor", 0.0, 1000.0);
  auto shared = r_.get_int(moe, p, "shared_experts", 0, 1 << 20);
  auto first_dense = r_.get_int(moe, p, "first_dense_layers", 0, kMaxLayers);
  auto imbalance = r_.get_double(moe, p, "imbalance", 1.0, 1e6);
  auto groups = r_.get_int(moe, p, "router_groups", 1, 1 << 20);
  auto group_topk = r_.get_int(moe, p, "router_group_topk", 1, 1 << 20);
  if (groups) s.router_groups = static_cast<int>(*groups);
  if (group_topk) s.router_group_topk = static_cast<int>(*group_topk);
  if (groups.has_value() != group_topk.has_value())
    r_.error(moe[groups ? "router_groups" : "router_group_topk"],
             join_path(p, groups ? "router_groups" : "router_group_topk"),
             "router_groups and router_group_topk go together (node-limited routing)");
  else if (groups && experts && (*experts % *groups != 0 || *group_topk > *groups))
    r_.error(moe["router_groups"], join_path(p, "router_groups"),
             fmt::format("expected groups dividing experts ({}) and router_group_topk <= "
                         "groups, got {} groups, top {}",
                         *experts, *groups, *group_topk));
  // Imbalance: the busiest expert can take at most every token once (E/k x the mean);
  // with token drop every expert takes exactly its capacity, so it has no meaning there.
  if (imbalance && experts && top_k && *imbalance > double(*experts) / double(*top_k))
    r_.error(moe["imbalance"], join_path(p, "imbalance"),
             fmt::format("expected at most experts/top_k = {} (the busiest expert can take "
                         "each token once), got {}",
                         double(*experts) / double(*top_k), *imbalance));
  else if (imbalance && moe["capacity_factor"] && *imbalance != 1.0)
    r_.error(moe["imbalance"], join_path(p, "imbalance"),
             "imbalance applies to dropless routing; with capacity_factor every expert is "
             "padded to its capacity (remove one of the two)");
  else if (imbalance)
    s.imbalance = *imbalance;
  if (experts) s.experts = static_cast<int>(*experts);
  if (top_k) s.top_k = static_cast<int>(*top_k);
  if (ffn) s.ffn_hidden = *ffn;
  if (every) s.every = static_cast<int>(*every);
  if (cf) {
    if (*cf <= 0)
      r_.error(moe["capacity_factor"], join_path(p, "capacity_factor"),
               "expected a positive number, got 0");
    else
      s.capacity_factor = *cf;
  }
  if (shared) s.shared_experts = static_cast<int>(*shared);
  if (first_dense) s.first_dense_layers = static_cast<int>(*first_dense);
  if (experts && top_k && *top_k > *experts)
    r_.error(moe["top_k"], join_path(p, "top_k"),
             fmt::format("top_k ({}) must not exceed experts ({})", *top_k, *experts));
  if (layers && first_dense && *first_dense >= *layers) {
    r_.error(moe["first_dense_layers"], join_path(p, "first_dense_layers"),
             fmt::format("expected fewer than layers ({}) leading dense layers, got {}", *layers,
                         *first_dense));
  } else if (layers && every) {
    // The first MoE layer l >= first_dense_layers with (l + 1) % every == 0
    // (ModelArch::is_moe_layer) must exist, else the model runs dense under its moe: block.
    const std::int64_t fd = first_dense.value_or(0);
    const std::int64_t first_moe = (fd + *every) / *every * *every - 1;
    if (first_moe >= *layers)
      r_.error(moe["every"], join_path(p, "every"),
               fmt::format("no layer would be a MoE layer: every {} with {} leading dense "
                           "layers over {} layers",
                           *every, fd, *layers));
  }
  out.moe = s;
}

// ---- cluster -----------------------------------------------------------------------
bool Loader::parse_cluster(const YAML::Node& c, Scenario& sc) {
  const std::string p = "cluster";
  if (!r_.expect_map(c, p, kClusterKeys)) return false;
  bool ok = r_.require(c, p, "profile");
  auto nodes = r_.get_int(c, p, "nodes", 1, 1 << 20);
  auto gpus = r_.get_int(c, p, "gpus", 1, 1 << 26);
  if (c["nodes"] && c["gpus"]) {
    r_.error(c["nodes"], "cluster.nodes",
             "give exactly one of cluster.nodes and cluster.gpus, not both");
    ok = false;
  } else if (!c["nodes"] && !c["gpus"]) {
    r_.error(c, "cluster.nodes", "missing: give exactly one of cluster.nodes and cluster.gpus");
    ok = false;
  }
  ok = ok && (nodes || gpus);
  auto profile = r_.get_string(c, p, "profile");
  if (!profile) return false;
  const std::string dir = default_profiles_dir();
  // A relative path is taken relative to the scenario file's folder first.
  std::string name = *profile;
  if (!file_.empty() && name.find('/') != std::string::npos && name.front() != '/') {
    const auto local = std::filesystem::path(file_).parent_path() / name;
    if (!resolve_profile_path(local.string(), dir).empty()) name = local.string();
  }
  if (resolve_profile_path(name, dir).empty()) {
    auto known = builtin_profile_names(dir);
    std::string hint = closest_match(*profile, known);
    r_.error(c["profile"], "cluster.profile",
             fmt::format("unknown profile \"{}\" (known in {}: {}){}", *profile, dir,
                         known.empty() ? "none" : join_list(known),
                         hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint)));
    return false;
  }
  try {
    sc.profile = load_profile(name, dir, c["overrides"], file_);
  } catch (const InputError& e) {
    for (const auto& i : e.issues()) issues_.add(i);
    return false;
  }
  profile_ok_ = true;
  if (!ok) return false;
  const int per_node = sc.profile.node.gpus;
  if (nodes) {
    sc.nodes = static_cast<int>(*nodes);
    sc.gpus = sc.nodes * per_node;
  } else {
    sc.gpus = static_cast<int>(*gpus);
    if (sc.gpus < per_node) {
      sc.nodes = 1;  // a partial node
    } else if (sc.gpus % per_node != 0) {
      r_.error(c["gpus"], "cluster.gpus",
               fmt::format("expected a multiple of the {} GPUs per node of profile {} (or "
                           "fewer than one node), got {}",
                           per_node, sc.profile.name, sc.gpus));
      return false;
    } else {
      sc.nodes = sc.gpus / per_node;
    }
  }
  if (sc.nodes > 1 && sc.profile.node.nics == 0) {
    r_.error(first_of(c, {"nodes", "gpus"}), nodes ? "cluster.nodes" : "cluster.gpus",
             fmt::format("{} nodes need NICs, but profile {} has node.nics: 0", sc.nodes,
                         sc.profile.name));
    return false;
  }
  if (c["stragglers"]) return parse_stragglers(c["stragglers"], sc);
  return true;
}

// cluster.stragglers (scenario.h Straggler): [{gpu: 5, compute: 0.8}, {node: 1, nic: 0.5}]
bool Loader::parse_stragglers(const YAML::Node& list, Scenario& sc) {
  const std::string p = "cluster.stragglers";
  if (!list.IsSequence()) {
    r_.error(list, p,
             "expected a list of entries like {gpu: 5, compute: 0.8} or {node: 1, nic: 0.5}");
    return false;
  }
  const std::size_t before = issues_.issues().size();
  std::map<std::pair<bool, int>, int> seen;  // (is node, index) -> entry
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node e = list[i];
    const std::string ep = fmt::format("{}[{}]", p, i);
    if (!r_.expect_map(e, ep, kStragglerKeys)) continue;
    auto gpu = r_.get_int(e, ep, "gpu", 0, sc.gpus - 1);
    auto node = r_.get_int(e, ep, "node", 0, sc.nodes - 1);
    if (e["gpu"] && e["node"]) {
      r_.error(e["node"], ep + ".node", "give one of gpu and node, not both");
      continue;
    }
    if (!e["gpu"] && !e["node"]) {
      r_.error(e, ep + ".gpu", "missing: name the slow GPU (gpu: RANK) or node (node: INDEX)");
      continue;
    }
    Straggler s;
    bool any = false;
    for (auto [key, field] :
         {std::pair{"compute", &s.speed.compute}, std::pair{"nic", &s.speed.nic},
          std::pair{"nvlink", &s.speed.nvlink}}) {
      if (!e[key]) continue;
      any = true;
      auto v = r_.get_double(e, ep, key, -std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::max());
      // Below 1% of its speed a GPU or link is down, not slow: a failed rank, which
      // stepcast does not model (and whose tasks would run for years of simulated time).
      if (v && !(*v >= kMinStragglerSpeed && *v <= 1))
        r_.error(e[key], join_path(ep, key),
                 fmt::format("expected a fraction of nominal speed in [{}, 1], got {}{}",
                             kMinStragglerSpeed, *v,
                             *v > 0 && *v < kMinStragglerSpeed
                                 ? " (below that the GPU or link is down, not slow: a failed "
                                   "rank is not modelled)"
                                 : ""));
      else if (v)
        *field = *v;
    }
    if (!any)
      r_.error(e, ep + ".compute",
               "missing: give at least one of compute, nic, nvlink (fractions of nominal "
               "speed in [0.01, 1])");
    if (!gpu && !node) continue;  // out of range: reported
    const bool is_node = node.has_value();
    const int index = static_cast<int>(is_node ? *node : *gpu);
    auto [it, fresh] = seen.try_emplace({is_node, index}, static_cast<int>(i));
    if (!fresh) {
      r_.error(e[is_node ? "node" : "gpu"], ep + (is_node ? ".node" : ".gpu"),
               fmt::format("{} {} is already listed in {}[{}]", is_node ? "node" : "gpu", index, p,
                           it->second));
      continue;
    }
    (is_node ? s.node : s.gpu) = index;
    sc.stragglers.push_back(s);
  }
  return issues_.issues().size() == before;
}

// ---- training ----------------------------------------------------------------------
bool Loader::parse_training(const YAML::Node& t, Scenario& sc) {
  const std::string p = "training";
  if (!r_.expect_map(t, p, kTrainingKeys)) return false;
  const std::size_t before = issues_.issues().size();
  r_.require(t, p, "seq_len");
  r_.require(t, p, "global_batch");
  if (auto v = r_.get_int(t, p, "seq_len", 1, kMaxI64)) sc.training.seq_len = *v;
  if (auto v = r_.get_int(t, p, "global_batch", 1, kMaxI64)) sc.training.global_batch = *v;
  if (auto v = r_.get_enum(t, p, "dtype", {"bf16", "fp16", "fp8", "mxfp8", "nvfp4"})) {
    for (DType d : {DType::kBf16, DType::kFp16, DType::kFp8, DType::kMxfp8, DType::kNvfp4})
      if (*v == dtype_name(d)) sc.training.dtype = d;
    // A GEMM dtype below 16 bits runs only on tensor cores that have it: fp8 from Hopper on,
    // mxfp8 and nvfp4 (block-scaled) from Blackwell on. The profile says so by its peaks.
    if (narrow_gemm_dtype(sc.training.dtype) && profile_ok_ &&
        sc.profile.gpu.peak_flop_per_s.count(sc.training.dtype) == 0)
      r_.error(t["dtype"], "training.dtype",
               fmt::format("{} needs a GPU with an {} peak, but profile {} ({}) lists none "
                           "in gpu.peak",
                           *v, *v, sc.profile.name, sc.profile.gpu.name));
  }
  if (auto v = r_.get_enum(t, p, "optimizer", {"adam", "sgd"}))
    sc.training.optimizer = *v == "sgd" ? Optimizer::kSgd : Optimizer::kAdam;
  if (auto v = r_.get_enum(t, p, "grad_reduce_dtype", {"fp32", "bf16", "fp16"})) {
    const DType g = *v == "fp32" ? DType::kFp32 : *v == "fp16" ? DType::kFp16 : DType::kBf16;
    // A 16-bit gradient buffer has the parameters' dtype (Megatron keeps main_grad in
    // the parameter dtype unless it is fp32); fp8 training keeps bf16 parameters.
    const DType params = activation_dtype(sc.training.dtype);
    if (g != DType::kFp32 && g != params)
      r_.error(t["grad_reduce_dtype"], "training.grad_reduce_dtype",
               fmt::format("{} gradients need {} parameters, but training.dtype {} keeps "
                           "them in {}; use fp32 or {}",
                           *v, *v, dtype_name(sc.training.dtype), dtype_name(params),
                           dtype_name(params)));
    else
      sc.training.grad_reduce_dtype = g;
  }
  if (auto v = r_.get_enum(t, p, "fp8_recipe", {"delayed", "current"})) {
    // The scaling of per-tensor fp8: block-scaled dtypes (mxfp8, nvfp4) carry their own.
    if (sc.training.dtype != DType::kFp8)
      r_.error(t["fp8_recipe"], "training.fp8_recipe",
               fmt::format("fp8_recipe sets the scaling of per-tensor fp8 GEMMs, but "
                           "training.dtype is {}; set dtype: fp8 or drop the key",
                           dtype_name(sc.training.dtype)));
    else
      sc.training.fp8_recipe = *v == "current" ? Fp8Recipe::kCurrent : Fp8Recipe::kDelayed;
  }
  return issues_.issues().size() == before;
}

// ---- parallel ----------------------------------------------------------------------
bool Loader::parse_parallel(const YAML::Node& par, ParallelSpec& out) {
  if (!par) return true;  // all defaults (dp derived)
  const std::string p = "parallel";
  if (!r_.expect_map(par, p, kParallelKeys)) return false;
  const std::size_t before = issues_.issues().size();
  auto get = [&](const char* key, int& dst) {
    if (auto v = r_.get_int(par, p, key, 1, 1 << 20)) dst = static_cast<int>(*v);
  };
  get("tp", out.tp);
  get("pp", out.pp);
  get("dp", out.dp);
  get("cp", out.cp);
  get("ep", out.ep);
  get("expert_tp", out.expert_tp);
  get("vpp", out.vpp);
  if (auto v = r_.get_int(par, p, "microbatch", 1, kMaxI64)) out.microbatch = *v;
  if (auto v = r_.get_int(par, p, "zero", 0, 3)) out.zero = static_cast<int>(*v);
  if (auto v = r_.get_bool(par, p, "sequence_parallel")) out.sequence_parallel = *v;
  if (auto v =
          r_.get_enum(par, p, "schedule", {"gpipe", "1f1b", "interleaved", "zb-h1", "dualpipev"}))
    out.schedule = *v == "gpipe"         ? Schedule::kGpipe
                   : *v == "interleaved" ? Schedule::kInterleaved
                   : *v == "zb-h1"       ? Schedule::kZbH1
                   : *v == "dualpipev"   ? Schedule::kDualPipeV
                                         : Schedule::k1F1B;
  if (auto v = r_.get_enum(par, p, "recompute", {"none", "selective", "full"}))
    out.recompute = *v == "full"        ? Recompute::kFull
                    : *v == "selective" ? Recompute::kSelective
                                        : Recompute::kNone;
  if (auto v = r_.get_enum(par, p, "moe_dispatcher", {"alltoall", "allgather", "deepep"}))
    out.moe_dispatcher = *v == "deepep"      ? MoeDispatcher::kDeepEp
                         : *v == "allgather" ? MoeDispatcher::kAllGather
                                             : MoeDispatcher::kAllToAll;
  if (auto v = r_.get_enum(par, p, "cp_kind", {"ring", "allgather"}))
    out.cp_kind = *v == "allgather" ? CpKind::kAllGather : CpKind::kRing;
  if (auto v = r_.get_double(par, p, "bucket_mb", 0.0, 1e6)) {
    if (*v <= 0)
      r_.error(par["bucket_mb"], "parallel.bucket_mb", "expected a positive number, got 0");
    else
      out.bucket_bytes = *v * 1e6;
  }
  if (const YAML::Node ov = par["overlap"]) {
    if (r_.expect_map(ov, "parallel.overlap", kOverlapKeys)) {
      if (auto v = r_.get_bool(ov, "parallel.overlap", "grad_reduce")) out.overlap_grad_reduce = *v;
      if (auto v = r_.get_bool(ov, "parallel.overlap", "param_gather"))
        out.overlap_param_gather = *v;
      if (auto v = r_.get_bool(ov, "parallel.overlap", "moe_shared_experts"))
        out.overlap_moe_shared = *v;
      if (auto v = r_.get_bool(ov, "parallel.overlap", "moe_ep_comm")) out.overlap_moe_ep = *v;
      if (auto v = r_.get_bool(ov, "parallel.overlap", "tp_comm")) {
        out.overlap_tp_comm = *v;
        if (*v && !out.sequence_parallel)
          r_.error(ov["tp_comm"], "parallel.overlap.tp_comm",
                   "TP communication overlap pipelines the all-gather / reduce-scatter of "
                   "sequence parallelism with the GEMMs: it requires sequence_parallel: true");
      }
    }
  }
  if (const YAML::Node pl = par["pipeline_layers"]) {
    if (!pl.IsSequence() || pl.size() == 0) {
      r_.error(pl, "parallel.pipeline_layers",
               "expected a non-empty list of layer counts, one per virtual pipeline stage");
    } else {
      for (std::size_t i = 0; i < pl.size(); ++i) {
        std::int64_t v = 0;
        const std::string ip = fmt::format("parallel.pipeline_layers[{}]", i);
        if (!pl[i].IsScalar() || !YAML::convert<std::int64_t>::decode(pl[i], v)) {
          r_.error(pl[i], ip, "expected an integer, got " + show_node(pl[i]));
        } else if (v < 0 || (v == 0 && i != 0 && i + 1 != pl.size())) {
          // 0 only where the stage still holds something: the first (the embedding) or the
          // last (the output layer and loss, and the MTP layers), as Megatron's custom
          // pipeline layouts allow (DeepSeek-V3's "Et|(tt|)*30mL" ends in a stage of MTP
          // and loss only).
          r_.error(pl[i], ip,
                   fmt::format("expected a positive number of layers (0 only for the first "
                               "or last virtual stage, which hold the embedding or the "
                               "output layer), got {}",
                               v));
        } else if (v > kMaxLayers) {
          r_.error(pl[i], ip,
                   fmt::format("expected a number of layers in [1, {}], got {}", kMaxLayers, v));
        } else {
          out.pipeline_layers.push_back(static_cast<int>(v));
        }
      }
      if (out.pipeline_layers.size() != pl.size()) out.pipeline_layers.clear();
    }
  }
  return issues_.issues().size() == before;
}

}  // namespace stepcast::detail
