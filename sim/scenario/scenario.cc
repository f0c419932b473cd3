// Scenario loading and validation (DESIGN.md, "Scenario YAML"). Every key is checked
// (unknown keys get the closest known key suggested), every value's type and range, every
// name (model, profile, schedule, recompute) and every cross-key rule of the parallel plan.
// Problems are collected, not thrown one by one: a file with three mistakes reports three
// issues in one InputError, each with file:line:column and the key path.
//
// Rules not obvious from the key names (the Megatron-LM rule each follows is named):
//  - cluster: exactly one of `nodes` / `gpus`. `gpus` must be a multiple of the profile's
//    node.gpus, except that fewer GPUs than one node holds are accepted as a partial node
//    (nodes = 1), so one-node experiments with 1, 2 or 4 GPUs can be described.
//  - parallel.dp may be omitted: dp = gpus / (tp*pp*cp), which must divide exactly.
//  - tp must divide heads and kv_heads (Megatron: num_attention_heads % tp == 0 and
//    num_query_groups % tp == 0; it does not replicate KV heads when kv_heads < tp).
//  - vpp > 1 if and only if schedule is interleaved; interleaved needs pp > 1 and the number
//    of microbatches to be a multiple of pp (Megatron's interleaved 1F1B schedule).
//  - cp: seq_len % cp == 0; with cp_kind ring also % (2*cp), Megatron's causal load
//    balancing splits the sequence into 2*cp chunks.
//  - sequence parallel with tp > 1 needs each cp rank's sequence (seq_len/cp) divisible by tp;
//    with tp == 1 it is a no-op and accepted.
//  - tp must divide ffn_hidden (when the model has a dense layer) and, without ep,
//    moe.ffn_hidden; with ep > 1, microbatch*seq_len/cp tokens must divide by tp, and so
//    must the shared experts' width shared_experts x moe.ffn_hidden (split like a dense MLP).
//  - ep > 1 needs a MoE model, experts % ep == 0 and (tp*cp*dp) % (etp*ep) == 0 (Megatron-
//    Core cuts the expert groups from a stage's tp*cp*dp ranks; sim/plan/layout.h).
//  - parallel.expert_tp (etp): 1 or tp, MoE models only; etp = tp with ep > 1 needs sequence
//    parallelism. Default: tp without ep, 1 with ep (model/workload.h expert_tp_of).
//  - microbatches x layers (the layer passes of one step, each simulated) is at most 2^21.
//  - ZeRO-3 with pp > 1 is allowed.
//  - fp8 training needs a GPU whose profile lists an fp8 peak.
//  - cluster.stragglers: a list; each entry names exactly one of `gpu` (0 .. gpus-1) or
//    `node` (0 .. nodes-1) and at least one of `compute`, `nic`, `nvlink`, each in [0.01, 1];
//    a GPU or node named twice is an error (its node and itself once each is allowed).
#include "sim/scenario/scenario.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "sim/io/yaml_util.h"

namespace stepcast {

GpuSpeeds gpu_speeds(const Scenario& sc) {
  if (sc.stragglers.empty()) return {};
  GpuSpeeds out(static_cast<size_t>(sc.gpus));
  const int per_node = std::max(1, sc.profile.node.gpus);
  for (const Straggler& s : sc.stragglers) {
    const int first = s.gpu >= 0 ? s.gpu : s.node * per_node;
    const int last = s.gpu >= 0 ? s.gpu : std::min(sc.gpus, (s.node + 1) * per_node) - 1;
    for (int g = first; g <= last; ++g) {
      GpuSpeed& v = out[static_cast<size_t>(g)];
      v.compute *= s.speed.compute;
      v.nic *= s.speed.nic;
      v.nvlink *= s.speed.nvlink;
    }
  }
  return out;
}

std::string stragglers_text(const Scenario& sc) {
  std::string out;
  for (const Straggler& s : sc.stragglers) {
    std::string parts;
    for (auto [name, v] : {std::pair{"compute", s.speed.compute}, std::pair{"nic", s.speed.nic},
                           std::pair{"nvlink", s.speed.nvlink}})
      if (v != 1) parts += fmt::format("{}{} x{:g}", parts.empty() ? "" : ", ", name, v);
    out += fmt::format("{}{} {}: {}", out.empty() ? "" : "; ", s.gpu >= 0 ? "gpu" : "node",
                       s.gpu >= 0 ? s.gpu : s.node, parts.empty() ? "nominal" : parts);
  }
  return out;
}

namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr std::int64_t kMaxI64 = std::int64_t{1} << 50;
constexpr std::int64_t kMaxLayers = 100000;

const std::vector<std::string> kTopKeys = {"name",     "model",    "cluster", "training",
                                           "parallel", "network",  "sweep"};
const std::vector<std::string> kModelKeys = {
    "name",  "layers",     "hidden", "ffn_hidden",      "heads",    "kv_heads",
    "vocab", "activation", "norm",   "tied_embeddings", "head_dim", "max_positions",
    "moe",   "dropout",    "qk_head_dim", "qkv_features"};
const std::vector<std::string> kMoeKeys = {"experts",         "top_k",          "ffn_hidden",
                                           "every",           "capacity_factor", "shared_experts",
                                           "first_dense_layers"};
const std::vector<std::string> kClusterKeys = {"profile", "nodes", "gpus", "overrides",
                                               "stragglers"};
const std::vector<std::string> kStragglerKeys = {"gpu", "node", "compute", "nic", "nvlink"};
const std::vector<std::string> kTrainingKeys = {"seq_len", "global_batch", "dtype", "optimizer",
                                                "grad_reduce_dtype"};
const std::vector<std::string> kParallelKeys = {
    "tp",       "pp",       "dp",        "cp",   "ep",
    "vpp",      "microbatch", "pipeline_layers", "schedule", "zero",
    "sequence_parallel", "recompute", "overlap", "bucket_mb", "cp_kind", "expert_tp"};
const std::vector<std::string> kOverlapKeys = {"grad_reduce", "param_gather", "tp_comm"};

std::string join_list(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The first of `keys` present in `map`, else the map itself: where a cross-key issue points.
YAML::Node first_of(const YAML::Node& map, std::initializer_list<const char*> keys) {
  if (map && map.IsMap())
    for (const char* k : keys)
      if (map[k]) return map[k];
  return map;
}

class Loader {
 public:
  // `cross_checks` false: only each key's own value is checked (sweep values).
  Loader(const YAML::Node& root, const std::string& file, bool cross_checks = true)
      : root_(root), file_(file), r_(file, issues_), cross_(cross_checks) {
    r_.set_root(root_);
  }

  Scenario run() {
    Scenario sc;
    sc.file = file_;
    sc.source = root_;
    if (!r_.expect_map(root_, "", kTopKeys)) {
      issues_.throw_if_any();
      return sc;
    }
    for (const char* key : {"model", "cluster", "training"}) r_.require(root_, "", key);
    if (auto v = r_.get_string(root_, "", "name")) {
      sc.name = *v;
    } else if (!file_.empty()) {
      sc.name = std::filesystem::path(file_).stem().string();
    }
    model_ok_ = root_["model"] && parse_model(root_["model"], sc.model);
    cluster_ok_ = root_["cluster"] && parse_cluster(root_["cluster"], sc);
    training_ok_ = root_["training"] && parse_training(root_["training"], sc);
    parallel_ok_ = parse_parallel(root_["parallel"], sc.parallel);
    if (auto v = r_.get_enum(root_, "", "network", {"analytical", "flow"}))
      sc.network = *v == "flow" ? NetworkMode::kFlow : NetworkMode::kAnalytical;
    if (cross_) cross_checks(sc);
    if (root_["sweep"]) parse_sweep(root_["sweep"], sc);
    if (!issues_.empty()) {
      // In file order: this file's issues by position, then those of other files (a
      // profile broken by an override).
      std::vector<InputIssue> v = issues_.issues();
      std::stable_sort(v.begin(), v.end(), [&](const InputIssue& a, const InputIssue& b) {
        const bool ao = a.file != file_, bo = b.file != file_;
        if (ao != bo) return bo;
        if (a.line != b.line) return a.line < b.line;
        return a.column < b.column;
      });
      throw InputError(std::move(v));
    }
    return sc;
  }

 private:
  // ---- model -------------------------------------------------------------------------
  bool parse_model(const YAML::Node& m, ModelArch& out) {
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
    // Grouped-query attention: each KV head serves heads/kv_heads query heads.
    if (heads && kv && *kv > *heads)
      r_.error(m["kv_heads"], join_path(p, "kv_heads"),
               fmt::format("expected at most heads ({}) KV heads, got {}", *heads, *kv));
    else if (heads && kv && *heads % *kv != 0)
      r_.error(m["kv_heads"], join_path(p, "kv_heads"),
               fmt::format("heads ({}) must be a multiple of kv_heads ({})", *heads, *kv));
    // Without an explicit head_dim, head_dim = hidden / heads must be exact.
    if (!m["head_dim"] && hidden && heads && *hidden % *heads != 0)
      r_.error(m["heads"], join_path(p, "heads"),
               fmt::format("hidden ({}) must be divisible by heads ({}) unless head_dim is given",
                           *hidden, *heads));
    if (const YAML::Node moe = m["moe"]) parse_moe(moe, out, layers);
    return ok && issues_.issues().size() == before;
  }

  void parse_moe(const YAML::Node& moe, ModelArch& out, std::optional<std::int64_t> layers) {
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
    if (layers && first_dense && *first_dense >= *layers)
      r_.error(moe["first_dense_layers"], join_path(p, "first_dense_layers"),
               fmt::format("expected fewer than layers ({}) leading dense layers, got {}",
                           *layers, *first_dense));
    out.moe = s;
  }

  // ---- cluster -----------------------------------------------------------------------
  bool parse_cluster(const YAML::Node& c, Scenario& sc) {
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
  static constexpr double kMinStragglerSpeed = 0.01;
  bool parse_stragglers(const YAML::Node& list, Scenario& sc) {
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
      for (auto [key, field] : {std::pair{"compute", &s.speed.compute},
                                std::pair{"nic", &s.speed.nic},
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
                 fmt::format("{} {} is already listed in {}[{}]", is_node ? "node" : "gpu",
                             index, p, it->second));
        continue;
      }
      (is_node ? s.node : s.gpu) = index;
      sc.stragglers.push_back(s);
    }
    return issues_.issues().size() == before;
  }

  // ---- training ----------------------------------------------------------------------
  bool parse_training(const YAML::Node& t, Scenario& sc) {
    const std::string p = "training";
    if (!r_.expect_map(t, p, kTrainingKeys)) return false;
    const std::size_t before = issues_.issues().size();
    r_.require(t, p, "seq_len");
    r_.require(t, p, "global_batch");
    if (auto v = r_.get_int(t, p, "seq_len", 1, kMaxI64)) sc.training.seq_len = *v;
    if (auto v = r_.get_int(t, p, "global_batch", 1, kMaxI64)) sc.training.global_batch = *v;
    if (auto v = r_.get_enum(t, p, "dtype", {"bf16", "fp16", "fp8"})) {
      sc.training.dtype = *v == "fp8" ? DType::kFp8 : *v == "fp16" ? DType::kFp16 : DType::kBf16;
      if (sc.training.dtype == DType::kFp8 && profile_ok_ &&
          sc.profile.gpu.peak_flop_per_s.count(DType::kFp8) == 0)
        r_.error(t["dtype"], "training.dtype",
                 fmt::format("fp8 needs a GPU with an fp8 peak, but profile {} ({}) lists none "
                             "in gpu.peak",
                             sc.profile.name, sc.profile.gpu.name));
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
    return issues_.issues().size() == before;
  }

  // ---- parallel ----------------------------------------------------------------------
  bool parse_parallel(const YAML::Node& par, ParallelSpec& out) {
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
    if (auto v = r_.get_enum(par, p, "schedule", {"gpipe", "1f1b", "interleaved", "zb-h1"}))
      out.schedule = *v == "gpipe"         ? Schedule::kGpipe
                     : *v == "interleaved" ? Schedule::kInterleaved
                     : *v == "zb-h1"       ? Schedule::kZbH1
                                           : Schedule::k1F1B;
    if (auto v = r_.get_enum(par, p, "recompute", {"none", "selective", "full"}))
      out.recompute = *v == "full"        ? Recompute::kFull
                      : *v == "selective" ? Recompute::kSelective
                                          : Recompute::kNone;
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
        if (auto v = r_.get_bool(ov, "parallel.overlap", "grad_reduce"))
          out.overlap_grad_reduce = *v;
        if (auto v = r_.get_bool(ov, "parallel.overlap", "param_gather"))
          out.overlap_param_gather = *v;
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
          } else if (v < 1) {
            r_.error(pl[i], ip,
                     fmt::format("expected a positive number of layers, got {}", v));
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

  // ---- rules across sections ---------------------------------------------------------
  void cross_checks(Scenario& sc) {
    const YAML::Node par = root_["parallel"];
    ParallelSpec& pl = sc.parallel;
    const ModelArch& m = sc.model;
    auto at = [&](const char* key) { return first_of(par, {key}); };
    auto path = [](const char* key) { return std::string("parallel.") + key; };

    // vpp > 1 <=> interleaved (Megatron: --num-layers-per-virtual-pipeline-stage selects the
    // interleaved schedule; the interleaved schedule needs it).
    if (parallel_ok_) {
      if (pl.vpp > 1 && pl.schedule != Schedule::kInterleaved)
        r_.error(at("vpp"), path("vpp"),
                 fmt::format("vpp = {} needs schedule: interleaved (got {})", pl.vpp,
                             schedule_name(pl.schedule)));
      if (pl.schedule == Schedule::kInterleaved && pl.vpp < 2)
        r_.error(at("schedule"), path("schedule"),
                 "the interleaved schedule needs vpp >= 2 model chunks per pipeline rank");
      if (pl.schedule == Schedule::kInterleaved && pl.pp < 2)
        r_.error(at("schedule"), path("schedule"),
                 fmt::format("the interleaved schedule needs pp >= 2, got pp = {}", pl.pp));
    }
    // Plan size against the cluster.
    bool dp_ok = false;
    if (parallel_ok_ && cluster_ok_) {
      const std::int64_t tpc = std::int64_t{pl.tp} * pl.pp * pl.cp;
      if (par && par["dp"]) {
        if (tpc * pl.dp != sc.gpus)
          r_.error(par["dp"], path("dp"),
                   fmt::format("tp*pp*dp*cp = {}*{}*{}*{} = {} must equal the cluster's {} GPUs",
                               pl.tp, pl.pp, pl.dp, pl.cp, tpc * pl.dp, sc.gpus));
        else
          dp_ok = true;
      } else if (sc.gpus % tpc != 0) {
        r_.error(first_of(par, {"tp", "pp", "cp"}), path("dp"),
                 fmt::format("cannot derive dp: the cluster's {} GPUs are not divisible by "
                             "tp*pp*cp = {}*{}*{} = {}",
                             sc.gpus, pl.tp, pl.pp, pl.cp, tpc));
      } else {
        pl.dp = static_cast<int>(sc.gpus / tpc);
        dp_ok = true;
      }
    }
    // Batch against dp and microbatch; microbatch-count rules of the schedules.
    if (dp_ok && training_ok_) {
      const std::int64_t per_step = std::int64_t{pl.dp} * pl.microbatch;
      const YAML::Node gb = root_["training"]["global_batch"];
      if (sc.training.global_batch % per_step != 0) {
        r_.error(gb, "training.global_batch",
                 fmt::format("global_batch ({}) must be divisible by dp*microbatch = {}*{} = {}",
                             sc.training.global_batch, pl.dp, pl.microbatch, per_step));
      } else if (model_ok_ && (sc.microbatches() > kMaxLayerPasses ||
                               sc.microbatches() * m.layers > kMaxLayerPasses)) {
        r_.error(gb, "training.global_batch",
                 fmt::format("global_batch/(dp*microbatch) = {} microbatches of the model's {} "
                             "layers make {} layer passes per step, more than the {} one "
                             "simulation can hold: give a larger microbatch or a smaller "
                             "global_batch",
                             sc.microbatches(), m.layers,
                             static_cast<double>(sc.microbatches()) * m.layers,
                             kMaxLayerPasses));
      } else if (pl.schedule == Schedule::kInterleaved && pl.pp > 1 &&
                 sc.microbatches() % pl.pp != 0) {
        r_.error(at("schedule"), path("schedule"),
                 fmt::format("the interleaved schedule needs the number of microbatches "
                             "(global_batch/(dp*microbatch) = {}) to be a multiple of pp ({})",
                             sc.microbatches(), pl.pp));
      }
    }
    // Model against tp / pp / ep.
    if (parallel_ok_ && model_ok_) {
      if (m.heads % pl.tp != 0)
        r_.error(at("tp"), path("tp"),
                 fmt::format("the model's heads ({}) must be divisible by tp ({})", m.heads,
                             pl.tp));
      else if (m.kv_heads % pl.tp != 0)
        r_.error(at("tp"), path("tp"),
                 fmt::format("the model's kv_heads ({}) must be divisible by tp ({}) "
                             "(Megatron: num_query_groups % tp == 0)",
                             m.kv_heads, pl.tp));
      // The MLP's columns are split over tp (Megatron: ffn_hidden_size % tp == 0); so are
      // the experts' without ep, and with ep the MoE layers split each microbatch's tokens
      // over tp (model/workload.cc checks each; found only there they were internal errors).
      bool has_dense = !m.moe;
      for (int l = 0; !has_dense && l < m.layers; ++l) has_dense = !m.is_moe_layer(l);
      if (has_dense && m.ffn_hidden % pl.tp != 0)
        r_.error(at("tp"), path("tp"),
                 fmt::format("the model's ffn_hidden ({}) must be divisible by tp ({})",
                             m.ffn_hidden, pl.tp));
      // An invalid expert_tp is reported below; the other rules then use the default.
      const int etp = expert_tp_of(pl.tp, pl.ep,
                                   pl.expert_tp == 1 || pl.expert_tp == pl.tp ? pl.expert_tp : 0);
      if (m.moe && etp > 1 && m.moe->ffn_hidden % etp != 0)
        r_.error(at("tp"), path("tp"),
                 fmt::format("the model's moe.ffn_hidden ({}) must be divisible by tp ({}) "
                             "(the experts are split over tp: no ep, or expert_tp = tp)",
                             m.moe->ffn_hidden, pl.tp));
      if (pl.expert_tp > 0) {
        if (!m.moe)
          r_.error(at("expert_tp"), path("expert_tp"),
                   fmt::format("expert_tp needs a MoE model (one with model.moe), but the "
                               "model ({}) is dense",
                               m.name));
        else if (pl.expert_tp != 1 && pl.expert_tp != pl.tp)
          r_.error(at("expert_tp"), path("expert_tp"),
                   fmt::format("expected 1 (experts whole) or tp ({}: experts split like the "
                               "dense MLP), got {}",
                               pl.tp, pl.expert_tp));
        else if (pl.expert_tp > 1 && pl.ep > 1 && !pl.sequence_parallel)
          r_.error(at("expert_tp"), path("expert_tp"),
                   fmt::format("experts split over tp ({}) with ep ({}) need "
                               "sequence_parallel: true (Megatron-Core: MoE with tensor "
                               "parallelism uses sequence parallelism)",
                               pl.expert_tp, pl.ep));
      }
      if (m.moe && pl.ep > 1 && m.moe->shared_experts > 0 &&
          (m.moe->shared_experts * m.moe->ffn_hidden) % pl.tp != 0)
        r_.error(at("tp"), path("tp"),
                 fmt::format("the model's shared experts (shared_experts x moe.ffn_hidden = "
                             "{} x {}) must be divisible by tp ({}): they are split over tp "
                             "like a dense MLP",
                             m.moe->shared_experts, m.moe->ffn_hidden, pl.tp));
      if (m.moe && pl.ep > 1 && training_ok_ && sc.training.seq_len % pl.cp == 0 &&
          (pl.microbatch * (sc.training.seq_len / pl.cp)) % pl.tp != 0)
        r_.error(at("tp"), path("tp"),
                 fmt::format("with ep > 1 the MoE layers split each microbatch's "
                             "microbatch*seq_len/cp = {} tokens over tp ({}): they must be "
                             "divisible",
                             pl.microbatch * (sc.training.seq_len / pl.cp), pl.tp));
      const int stages = pl.pp * pl.vpp;
      if (!pl.pipeline_layers.empty()) {
        const YAML::Node pln = par["pipeline_layers"];
        std::int64_t sum = 0;
        for (int v : pl.pipeline_layers) sum += v;
        if (static_cast<int>(pl.pipeline_layers.size()) != stages)
          r_.error(pln, path("pipeline_layers"),
                   fmt::format("expected pp*vpp = {}*{} = {} entries, got {}", pl.pp, pl.vpp,
                               stages, pl.pipeline_layers.size()));
        else if (sum != m.layers)
          r_.error(pln, path("pipeline_layers"),
                   fmt::format("the entries sum to {} but the model has {} layers", sum,
                               m.layers));
      } else if (m.layers % stages != 0) {
        r_.error(first_of(par, {"pp", "vpp"}), path(par && !par["pp"] && par["vpp"] ? "vpp" : "pp"),
                 fmt::format("the model's {} layers do not split evenly over pp*vpp = {}*{} = {} "
                             "stages; give parallel.pipeline_layers",
                             m.layers, pl.pp, pl.vpp, stages));
      }
      if (pl.ep > 1) {
        if (!m.moe) {
          r_.error(at("ep"), path("ep"),
                   fmt::format("ep = {} needs a MoE model (one with model.moe), but the "
                               "model ({}) is dense",
                               pl.ep, m.name));
        } else if (m.moe->experts % pl.ep != 0) {
          r_.error(at("ep"), path("ep"),
                   fmt::format("the model's experts ({}) must be divisible by ep ({})",
                               m.moe->experts, pl.ep));
        } else if (dp_ok && (pl.tp * pl.cp * pl.dp) % (etp * pl.ep) != 0) {
          r_.error(at("ep"), path("ep"),
                   etp == 1 ? fmt::format("ep ({}) must divide tp*cp*dp = {}*{}*{} = {} (expert "
                                          "groups are cut from the ranks of a pipeline stage)",
                                          pl.ep, pl.tp, pl.cp, pl.dp, pl.tp * pl.cp * pl.dp)
                            : fmt::format("ep ({}) must divide cp*dp = {}*{} = {} (with expert_tp "
                                          "= tp each expert group keeps one tp index)",
                                          pl.ep, pl.cp, pl.dp, pl.cp * pl.dp));
        }
      }
    }
    // Sequence against cp and tp.
    if (parallel_ok_ && training_ok_) {
      const std::int64_t s = sc.training.seq_len;
      bool cp_ok = true;
      if (pl.cp > 1 && pl.cp_kind == CpKind::kRing && s % (2 * pl.cp) != 0) {
        cp_ok = false;
        r_.error(at("cp"), path("cp"),
                 fmt::format("ring context parallelism splits seq_len ({}) into 2*cp = {} chunks "
                             "(causal load balancing): it must be divisible",
                             s, 2 * pl.cp));
      } else if (s % pl.cp != 0) {
        cp_ok = false;
        r_.error(at("cp"), path("cp"),
                 fmt::format("seq_len ({}) must be divisible by cp ({})", s, pl.cp));
      }
      if (cp_ok && pl.sequence_parallel && pl.tp > 1 && (s / pl.cp) % pl.tp != 0)
        r_.error(at("sequence_parallel"), path("sequence_parallel"),
                 fmt::format("sequence parallelism splits each cp rank's {} tokens over tp = {}: "
                             "seq_len/cp must be divisible by tp",
                             s / pl.cp, pl.tp));
      if (model_ok_ && m.max_positions > 0 && s > m.max_positions)
        r_.error(root_["training"]["seq_len"], "training.seq_len",
                 fmt::format("seq_len ({}) exceeds the model's learned positions "
                             "(max_positions = {})",
                             s, m.max_positions));
    }
  }

  // ---- sweep -------------------------------------------------------------------------
  // Each axis's key must be a valid scenario path and each value valid there. Checked by
  // loading the scenario (without its sweep) with the value set at the key and keeping the
  // problems about that key; problems between keys are left to each sweep point.
  void parse_sweep(const YAML::Node& sw, Scenario& sc) {
    if (!sw.IsMap()) {
      r_.error(sw, "sweep", "expected a mapping of dotted keys to lists of values");
      return;
    }
    YAML::Node base(YAML::NodeType::Map);
    for (const auto& kv : root_)
      if (!(kv.first.IsScalar() && kv.first.Scalar() == "sweep")) base.force_insert(kv.first, kv.second);
    std::set<std::string> seen;
    for (const auto& kv : sw) {
      const YAML::Node& k = kv.first;
      const std::string key = k.IsScalar() ? k.Scalar() : "";
      const std::string kp = "sweep." + key;
      if (split_dotted(key).empty()) {
        r_.error(k, "sweep", "expected a dotted scenario key such as parallel.tp, got " +
                                 show_node(k));
        continue;
      }
      if (!seen.insert(key).second) {
        r_.error(k, kp, "duplicate key");
        continue;
      }
      if (key == "sweep" || key.rfind("sweep.", 0) == 0 || key == "name") {
        r_.error(k, kp, "this key cannot be swept");
        continue;
      }
      const YAML::Node& vals = kv.second;
      if (!vals.IsSequence() || vals.size() == 0) {
        r_.error(vals, kp, "expected a non-empty list of values");
        continue;
      }
      std::set<std::string> reported;
      SweepAxis axis;
      axis.key = key;
      for (const auto& v : vals) {
        axis.values.push_back(v);
        std::vector<InputIssue> found;
        try {
          Loader(with_dotted_key(base, key, v), file_, false).run();
        } catch (const InputError& e) {
          found = e.issues();
        }
        for (InputIssue i : found) {
          const bool about_key = i.key == key || i.key.rfind(key + ".", 0) == 0 ||
                                 i.key.rfind(key + "[", 0) == 0 || key.rfind(i.key + ".", 0) == 0;
          if (!about_key) continue;
          if (i.line == 0) {  // a node the splice created: point at the sweep key
            i.file = file_;
            i.line = k.Mark().line + 1;
            i.column = k.Mark().column + 1;
          }
          i.key = "sweep." + i.key;
          const std::string id = i.key + ": " + i.message;
          if (reported.insert(id).second) issues_.add(i);
        }
      }
      sc.sweep.push_back(std::move(axis));
    }
  }

  YAML::Node root_;
  std::string file_;
  IssueList issues_;
  YamlReader r_;
  bool model_ok_ = false, cluster_ok_ = false, training_ok_ = false, parallel_ok_ = false;
  bool profile_ok_ = false;
  bool cross_ = true;
};

}  // namespace

std::int64_t simulated_layer_passes(const Scenario& sc, bool folded) {
  const std::int64_t passes = sc.microbatches() * sc.model.layers;
  if (folded) return passes;
  return passes * std::max(1, sc.gpus / std::max(1, sc.parallel.pp));
}

void check_simulation_size(const Scenario& sc, bool folded) {
  const std::int64_t passes = simulated_layer_passes(sc, folded);
  if (folded || passes <= kMaxRankLayerPasses) return;
  // At the stragglers when they are what unfolds the simulation, else at the cluster.
  // Read-only (const operator[], reset): the document may be read by other threads.
  const YAML::Node& root = sc.source;
  YAML::Mark m = YAML::Mark::null_mark();
  std::string key = "cluster";
  if (root.IsMap() && root["cluster"] && root["cluster"].IsMap()) {
    const YAML::Node c = root["cluster"];
    m = c.Mark();
    for (const char* k : {"stragglers", "nodes", "gpus"})
      if (c[k] && (k != std::string("stragglers") || !sc.stragglers.empty())) {
        m = c[k].Mark();
        key = std::string("cluster.") + k;
        break;
      }
  }
  throw InputError(InputIssue{
      sc.file, m.is_null() ? 1 : m.line + 1, m.is_null() ? 1 : m.column + 1, key,
      fmt::format("simulating every rank (full fidelity{}) holds {} microbatches x {} layers x "
                  "{} GPUs / pp {} = {} layer passes, more than the {} one simulation can hold: "
                  "give a larger microbatch or a smaller global_batch{}",
                  sc.stragglers.empty() ? "" : ", as stragglers need", sc.microbatches(),
                  sc.model.layers, sc.gpus, sc.parallel.pp, passes, kMaxRankLayerPasses,
                  sc.stragglers.empty() ? ", or run folded" : "")});
}

Scenario load_scenario(const std::string& path) {
  return load_scenario_node(load_yaml_file(path), path);
}

Scenario load_scenario_node(const YAML::Node& root, const std::string& file) {
  return Loader(root, file).run();
}

YAML::Node with_dotted_key(const YAML::Node& root, const std::string& dotted_key,
                           const YAML::Node& value) {
  auto segs = split_dotted(dotted_key);
  // cluster.overrides holds dotted profile paths as single keys ({node.nic: 100 Gb/s}).
  if (segs.size() > 3 && segs[0] == "cluster" && segs[1] == "overrides") {
    for (std::size_t i = 3; i < segs.size(); ++i) segs[2] += "." + segs[i];
    segs.resize(3);
  }
  if (segs.empty())
    throw InputError(InputIssue{"", 0, 0, dotted_key, "expected a dotted key such as parallel.tp"});
  // Copies the mappings along the path (keeping every other node shared, with its position
  // in the file for messages) and sets the value at the end.
  auto rec = [&](auto&& self, const YAML::Node& node, std::size_t i) -> YAML::Node {
    YAML::Node out(YAML::NodeType::Map);
    bool replaced = false;
    if (node && node.IsMap()) {
      for (const auto& kv : node) {
        if (!replaced && kv.first.IsScalar() && kv.first.Scalar() == segs[i]) {
          replaced = true;
          out.force_insert(kv.first, i + 1 == segs.size() ? value : self(self, kv.second, i + 1));
        } else {
          out.force_insert(kv.first, kv.second);
        }
      }
    } else if (node && node.IsDefined() && !node.IsNull()) {
      std::string walked;
      for (std::size_t j = 0; j < i; ++j) walked = join_path(walked, segs[j]);
      throw InputError(InputIssue{"", 0, 0, dotted_key,
                                  fmt::format("'{}' is a value, not a section: it has no key '{}'",
                                              walked, segs[i])});
    }
    if (!replaced)
      out[segs[i]] = i + 1 == segs.size() ? value : self(self, YAML::Node(), i + 1);
    return out;
  };
  return rec(rec, root, 0);
}

}  // namespace stepcast
