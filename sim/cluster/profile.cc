// Hardware profile loading (hw_profiles/*.yaml; schema in hw_profiles/README.md and
// docs/model.md). Strict: every key is checked, quantities need their units, and scenario
// overrides are spliced into the document before validation so they are checked by the very
// same code (an unknown override path is an unknown key, a bare number a missing unit), with
// their messages pointing at the scenario file.
#include "sim/cluster/profile.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "sim/io/dotted.h"

#ifndef STEPCAST_DEFAULT_PROFILES_DIR
#define STEPCAST_DEFAULT_PROFILES_DIR "hw_profiles"
#endif

namespace stepcast {

namespace fs = std::filesystem;

std::string default_profiles_dir() {
  const char* env = std::getenv("STEPCAST_PROFILES");
  if (env != nullptr && env[0] != '\0') return env;
  return STEPCAST_DEFAULT_PROFILES_DIR;
}

std::vector<std::string> builtin_profile_names(const std::string& profiles_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(profiles_dir, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".yaml")
      names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolve_profile_path(const std::string& name_or_path, const std::string& profiles_dir) {
  const bool is_path =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".yaml") == 0);
  fs::path p = is_path ? fs::path(name_or_path) : fs::path(profiles_dir) / (name_or_path + ".yaml");
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : std::string();
}

namespace {

std::optional<double> positive_quantity(YamlReader& r, const YAML::Node& map,
                                        const std::string& path, const std::string& key,
                                        Dimension dim) {
  auto v = r.get_quantity(map, path, key, dim);
  if (v && *v <= 0) {
    r.error(map[key], join_path(path, key),
            fmt::format("expected a positive value, got {}", show_node(map[key])));
    return std::nullopt;
  }
  return v;
}

void parse_gpu(YamlReader& r, const YAML::Node& g, GpuSpec& out) {
  const std::string p = "gpu";
  if (!r.expect_map(g, p, {"name", "memory", "memory_reserved", "hbm_bandwidth", "sms", "peak"}))
    return;
  for (const char* key : {"memory", "hbm_bandwidth", "sms", "peak"}) r.require(g, p, key);
  if (auto v = r.get_string(g, p, "name")) out.name = *v;
  if (auto v = positive_quantity(r, g, p, "memory", Dimension::kBytes)) out.memory_bytes = *v;
  if (auto v = r.get_quantity(g, p, "memory_reserved", Dimension::kBytes)) {
    if (*v < 0 || *v >= out.memory_bytes) {
      r.error(g["memory_reserved"], join_path(p, "memory_reserved"),
              fmt::format("expected at least 0 and less than gpu.memory ({}), got {}",
                          show_node(g["memory"]), show_node(g["memory_reserved"])));
    } else {
      out.memory_reserved_bytes = *v;
    }
  }
  if (auto v = positive_quantity(r, g, p, "hbm_bandwidth", Dimension::kBandwidth))
    out.hbm_bytes_per_s = *v;
  if (auto v = r.get_int(g, p, "sms", 1, 100000)) out.sms = static_cast<int>(*v);
  if (const YAML::Node pk = g["peak"]) {
    const std::string pp = "gpu.peak";
    if (r.expect_map(pk, pp, {"bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32"})) {
      // bf16 is what training runs in by default; the others are optional (an absent dtype
      // cannot be used for training on this GPU, e.g. fp8 before Hopper, mxfp8 and nvfp4
      // before Blackwell: Hopper's tensor cores have no block-scaled modes).
      r.require(pk, pp, "bf16");
      const std::pair<const char*, DType> dtypes[] = {
          {"bf16", DType::kBf16},   {"fp16", DType::kFp16},   {"fp8", DType::kFp8},
          {"mxfp8", DType::kMxfp8}, {"nvfp4", DType::kNvfp4}, {"fp32", DType::kFp32}};
      for (const auto& [key, dt] : dtypes) {
        if (auto v = positive_quantity(r, pk, pp, key, Dimension::kFlopRate))
          out.peak_flop_per_s[dt] = *v;
      }
    }
  }
}

void parse_node(YamlReader& r, const YAML::Node& n, NodeSpec& out) {
  const std::string p = "node";
  if (!r.expect_map(n, p, {"gpus", "gpus_per_host", "nvlink", "nvswitch", "nvls", "nics", "nic"}))
    return;
  for (const char* key : {"gpus", "nvlink", "nics", "nic"}) r.require(n, p, key);
  if (auto v = r.get_int(n, p, "gpus", 1, 1024)) out.gpus = static_cast<int>(*v);
  // The NVLink domain is whole hosts (an NVL72 rack: 18 trays of 4).
  if (auto v = r.get_int(n, p, "gpus_per_host", 1, 1024)) {
    if (out.gpus % *v != 0)
      r.error(n["gpus_per_host"], join_path(p, "gpus_per_host"),
              fmt::format("expected a divisor of node.gpus ({}): an NVLink domain holds whole "
                          "hosts, got {}",
                          out.gpus, *v));
    else
      out.gpus_per_host = static_cast<int>(*v);
  }
  if (auto v = positive_quantity(r, n, p, "nvlink", Dimension::kBandwidth))
    out.nvlink_bytes_per_s = *v;
  if (auto v = r.get_bool(n, p, "nvswitch")) out.nvswitch = *v;
  // Every GPU of a node reaches every other at the full NVLink rate through the NVSwitch
  // (intra_ring_busbw, p2p_intra_bw, the flow topology's one switch per node): GPUs without
  // one (PCIe boxes, NVLink bridges between pairs) have neither, and no model here says
  // what they get instead.
  if (!out.nvswitch)
    r.error(n["nvswitch"], join_path(p, "nvswitch"),
            "nvswitch: false is not modelled: the cost model and the flow topology assume every "
            "GPU of a node reaches every other through an NVSwitch at node.nvlink; GPUs behind "
            "PCIe or NVLink bridges are not supported");
  if (auto v = r.get_bool(n, p, "nvls")) out.nvls = *v;
  // 0 NICs: a single-node machine (multi-node plans are then rejected by the scenario).
  if (auto v = r.get_int(n, p, "nics", 0, 1024)) out.nics = static_cast<int>(*v);
  const auto nic = r.get_quantity(n, p, "nic", Dimension::kBandwidth);
  if (nic) out.nic_bytes_per_s = *nic;
  if (out.nics > 0 && nic && *nic <= 0)
    r.error(n["nic"], join_path(p, "nic"), "expected a positive bandwidth when nics > 0");
}

void parse_fabric(YamlReader& r, const YAML::Node& f, FabricSpec& out) {
  const std::string p = "fabric";
  if (!r.expect_map(f, p, {"topology", "oversubscription", "pod_gpus", "latency"})) return;
  // The network model (sim/network/topology.h) implements one topology: a rail-optimised
  // fat-tree (DGX SuperPOD style); naming another would be silently ignored, so it is an error.
  if (auto v = r.get_enum(f, p, "topology", {"rail-optimized"})) out.topology = *v;
  // 1.0 = full bisection; 7.0 = Llama 3's 1:7 aggregation layer (docs/model.md "Collectives and
  // network").
  if (auto v = r.get_double(f, p, "oversubscription", 1.0, 1000.0)) out.oversubscription = *v;
  if (auto v = r.get_int(f, p, "pod_gpus", 0, 1 << 30)) out.pod_gpus = static_cast<int>(*v);
  if (auto v = r.get_quantity(f, p, "latency", Dimension::kTime)) out.latency_s = *v;
}

}  // namespace

HwProfile parse_profile(YamlReader& r, const YAML::Node& root) {
  HwProfile prof;
  prof.file = r.file();
  r.set_root(root);
  if (!r.expect_map(root, "", {"name", "gpu", "node", "fabric", "compute", "collectives"}))
    return prof;
  for (const char* key : {"name", "gpu", "node"}) r.require(root, "", key);
  if (auto v = r.get_string(root, "", "name")) prof.name = *v;
  if (root["gpu"]) parse_gpu(r, root["gpu"], prof.gpu);
  if (root["node"]) parse_node(r, root["node"], prof.node);
  if (root["fabric"]) {
    parse_fabric(r, root["fabric"], prof.fabric);
    // Pods hold whole nodes (sim/network/topology.cc counts nodes per pod).
    const YAML::Node pg = root["fabric"].IsMap() ? root["fabric"]["pod_gpus"] : YAML::Node();
    if (pg && prof.fabric.pod_gpus > 0 && prof.node.gpus > 0 &&
        prof.fabric.pod_gpus % prof.node.gpus != 0)
      r.error(pg, "fabric.pod_gpus",
              fmt::format("expected a multiple of node.gpus ({}) (pods hold whole nodes), got {}",
                          prof.node.gpus, prof.fabric.pod_gpus));
  }
  if (root["compute"]) parse_compute_params(r, root["compute"], "compute", prof.compute);
  if (root["collectives"])
    parse_collective_params(r, root["collectives"], "collectives", prof.collectives);
  // The SMs communication kernels hold leave the rest to compute (sim/cost/coster.cc).
  if (prof.gpu.sms > 0 && prof.compute.comm_sms >= prof.gpu.sms) {
    const YAML::Node compute = root["compute"];
    const bool own = compute && compute.IsMap() && compute["comm_sms"];
    r.error(own ? compute["comm_sms"] : root["gpu"]["sms"], own ? "compute.comm_sms" : "gpu.sms",
            fmt::format("compute.comm_sms ({}) must be below gpu.sms ({}): communication "
                        "kernels would hold every SM",
                        prof.compute.comm_sms, prof.gpu.sms));
  }
  return prof;
}

void check_line_rates(YamlReader& r, const YAML::Node& root, const HwProfile& prof);  // below

namespace {

// Profiles that loaded without a problem, by path and file text. A search or a sweep loads
// each plan as a scenario of its own, so the same profile file was read and parsed once per
// plan: 7% of a 70B search (perf, load_profile). The text is read every time and compared, so
// an edited file is parsed again; a file with problems is never kept, so its errors are
// reported every time. Shared by all threads.
class ParsedProfiles {
 public:
  bool find(const std::string& path, const std::string& text, HwProfile& out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_path_.find(path);
    if (it == by_path_.end() || it->second.first != text) return false;
    out = it->second.second;
    return true;
  }
  void keep(const std::string& path, const std::string& text, const HwProfile& prof) {
    std::lock_guard<std::mutex> lock(mu_);
    by_path_.insert_or_assign(path, std::make_pair(text, prof));
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, HwProfile>> by_path_;
};

ParsedProfiles& parsed_profiles() {
  static ParsedProfiles cache;
  return cache;
}

// The profile file alone, without overrides (kept for the next load of the same text).
HwProfile parse_profile_file(const std::string& path, const std::string& text) {
  HwProfile prof;
  if (parsed_profiles().find(path, text, prof)) return prof;
  IssueList issues;
  YamlReader r(path, issues);
  const YAML::Node root = load_yaml_text(text, path);
  prof = parse_profile(r, root);
  if (issues.empty()) check_line_rates(r, root, prof);
  issues.throw_if_any();
  parsed_profiles().keep(path, text, prof);
  return prof;
}

}  // namespace

// A measured bus bandwidth above the line rate it runs over was not measured there: a NIC's
// (collectives.nic_busbw, per NIC) above node.nic, the intra-node ring's above node.nvlink
// (per direction; NVLink SHARP's nvls_busbw may exceed it: the switch reduces). An override
// of a line rate rescales the measured figures first (scale_measured_to_overrides), so only a
// profile written so, or an override setting the figure itself, is refused.
void check_line_rates(YamlReader& r, const YAML::Node& root, const HwProfile& prof) {
  auto at = [&](const char* section, const char* key) {
    const YAML::Node sec = root[section];
    return sec && sec.IsMap() && sec[key] ? sec[key] : root;
  };
  const CollectiveParams& c = prof.collectives;
  const double nic = prof.node.nic_bytes_per_s, nvl = prof.node.nvlink_bytes_per_s;
  if (nic > 0 && c.nic_busbw > nic * (1 + 1e-9))
    r.error(at("collectives", "nic_busbw"), "collectives.nic_busbw",
            fmt::format("{:.4g} GB/s is above node.nic, the line rate of one NIC ({:.4g} GB/s)",
                        c.nic_busbw / 1e9, nic / 1e9));
  if (nvl > 0 && c.intra_ring_busbw > nvl * (1 + 1e-9))
    r.error(at("collectives", "intra_ring_busbw"), "collectives.intra_ring_busbw",
            fmt::format("{:.4g} GB/s is above node.nvlink, the NVLink line rate per direction "
                        "({:.4g} GB/s)",
                        c.intra_ring_busbw / 1e9, nvl / 1e9));
}

HwProfile load_profile(const std::string& name_or_path, const std::string& profiles_dir,
                       const YAML::Node& overrides, const std::string& overrides_file) {
  const std::string path = resolve_profile_path(name_or_path, profiles_dir);
  if (path.empty()) {
    auto known = builtin_profile_names(profiles_dir);
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    std::string hint = closest_match(name_or_path, known);
    throw InputError(
        InputIssue{overrides_file, 0, 0, "cluster.profile",
                   fmt::format("unknown profile \"{}\" (known in {}: {}){}", name_or_path,
                               profiles_dir, list.empty() ? "none" : list,
                               hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint))});
  }
  const std::string text = read_text_file(path);
  if (!overrides || overrides.IsNull() || (overrides.IsMap() && overrides.size() == 0))
    return parse_profile_file(path, text);
  YAML::Node root = load_yaml_text(text, path);
  IssueList issues;
  YamlReader r(path, issues);
  const std::string prefix = "cluster.overrides.";
  if (overrides && !overrides.IsNull()) {
    YamlReader scen(overrides_file, issues);
    if (!overrides.IsMap()) {
      scen.error(overrides, "cluster.overrides",
                 "expected a mapping of dotted profile keys to values (e.g. {node.nics: 4})");
    } else {
      std::set<std::string> seen;
      for (auto it = overrides.begin(); it != overrides.end(); ++it) {
        const YAML::Node k = it->first;  // a copy: it-> yields a temporary
        const std::string key = k.IsScalar() ? k.Scalar() : std::string();
        const auto segs = split_dotted(key);
        if (segs.empty()) {
          scen.error(k, "cluster.overrides",
                     "expected a dotted profile key such as node.nics, got " + show_node(k));
          continue;
        }
        if (!seen.insert(key).second) {
          scen.error(k, prefix + key, "duplicate key");
          continue;
        }
        std::string err = set_dotted_in_place(root, segs, it->second);
        if (!err.empty()) {
          scen.error(k, prefix + key, "unknown key: " + err);
          continue;
        }
        r.add_splice(it->second, key, overrides_file, k, prefix);
      }
    }
  }
  HwProfile prof = parse_profile(r, root);
  issues.throw_if_any();
  HwProfile base;
  try {
    base = parse_profile_file(path, text);
    scale_measured_to_overrides(base, prof);
  } catch (const InputError&) {
    // The overrides mended the file: no base figures to scale from.
  }
  check_line_rates(r, root, prof);
  issues.throw_if_any();
  return prof;
}

// A what-if override of a line rate ("node.nic: 200 Gb/s", "node.nvlink: 225 GB/s") or a
// peak must move the measured figures that were taken at the file's rates, or the override
// would silently change nothing: effective bandwidths (busbw) and calibrated entries scale by
// the ratio of new to file line rate, unless the override also set them explicitly.
void scale_measured_to_overrides(const HwProfile& base, HwProfile& prof) {
  auto ratio = [](double now, double was) { return was > 0 && now > 0 ? now / was : 1.0; };
  const double nic = ratio(prof.node.nic_bytes_per_s, base.node.nic_bytes_per_s);
  const double nvl = ratio(prof.node.nvlink_bytes_per_s, base.node.nvlink_bytes_per_s);
  CollectiveParams& c = prof.collectives;
  const CollectiveParams& b = base.collectives;
  if (nic != 1.0 && c.nic_busbw == b.nic_busbw) c.nic_busbw *= nic;
  if (nvl != 1.0) {
    if (c.intra_ring_busbw == b.intra_ring_busbw) c.intra_ring_busbw *= nvl;
    if (c.nvls_busbw == b.nvls_busbw) c.nvls_busbw *= nvl;
    if (c.p2p_intra_bw == b.p2p_intra_bw) c.p2p_intra_bw *= nvl;
  }
  if (c.calibrated.size() == b.calibrated.size()) {
    for (size_t i = 0; i < c.calibrated.size(); ++i) {
      if (c.calibrated[i].busbw_bytes_per_s != b.calibrated[i].busbw_bytes_per_s) continue;
      c.calibrated[i].busbw_bytes_per_s *= c.calibrated[i].nodes > 1 ? nic : nvl;
    }
  }
  if (prof.compute.gemm_table.size() == base.compute.gemm_table.size()) {
    for (size_t i = 0; i < prof.compute.gemm_table.size(); ++i) {
      GemmPoint& g = prof.compute.gemm_table[i];
      if (g.flop_per_s != base.compute.gemm_table[i].flop_per_s) continue;
      auto now = prof.gpu.peak_flop_per_s.find(g.dtype);
      auto was = base.gpu.peak_flop_per_s.find(g.dtype);
      if (now != prof.gpu.peak_flop_per_s.end() && was != base.gpu.peak_flop_per_s.end()) {
        g.flop_per_s *= ratio(now->second, was->second);
      }
    }
  }
}

}  // namespace stepcast
