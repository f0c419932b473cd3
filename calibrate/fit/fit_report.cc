// The output of a fit: the fitted profile (write_yaml: the base profile's text with the
// fitted keys rewritten, yaml_patch.h) and the report (FitReport::text).
#include "calibrate/fit/fit.h"

#include "calibrate/fit/yaml_patch.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "calibrate/fit/fit_internal.h"
#include "model/error.h"
#include "sim/cost/cost.h"
#include "sim/io/yaml_util.h"

namespace stepcast {

using namespace fit_detail;

namespace fit_detail {

namespace {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---- YAML output ---------------------------------------------------------------------

std::string num(double v, int digits) { return fmt::format("{:.{}g}", v, digits); }

YAML::Node flow_map() {
  YAML::Node n(YAML::NodeType::Map);
  n.SetStyle(YAML::EmitterStyle::Flow);
  return n;
}

// Whether the fit set the profile key `k` (FitReport::fitted).
bool is_fitted(const FitReport& rep, const std::string& k) {
  return std::find(rep.fitted.begin(), rep.fitted.end(), k) != rep.fitted.end();
}

// compute: the fitted GEMM curve and gemm_table, memory-bound efficiency, launch overhead and
// comm_sms; its source names the measurements.
void write_compute(YAML::Node& doc, const HwProfile& base, const FitReport& rep,
                   const Measurements& m) {
  const ComputeParams& c = rep.compute;
  YAML::Node compute = doc["compute"];
  if (!compute.IsMap()) {
    compute = YAML::Node(YAML::NodeType::Map);
    doc["compute"] = compute;
  }
  // The fitted numbers of one sub-mapping (compute.gemm, compute.attention).
  auto write_keys = [&](const char* section, int digits,
                        std::initializer_list<std::pair<const char*, double>> keys) {
    for (const auto& [key, value] : keys) {
      if (!is_fitted(rep, std::string("compute.") + section + "." + key)) continue;
      if (!compute[section].IsMap()) compute[section] = YAML::Node(YAML::NodeType::Map);
      compute[section][key] = num(value, digits);
    }
  };
  write_keys("gemm", 5,
             {{"max_efficiency", c.gemm_max_eff},
              {"half_m", c.gemm_half_m},
              {"half_n", c.gemm_half_n},
              {"half_k", c.gemm_half_k},
              {"fp8_max_efficiency", c.fp8_max_eff},
              {"fp8_half_m", c.fp8_half_m},
              {"fp8_half_n", c.fp8_half_n},
              {"fp8_half_k", c.fp8_half_k},
              {"grouped_efficiency", c.gemm_grouped_eff}});
  if (is_fitted(rep, "compute.gemm.fixed_time"))
    compute["gemm"]["fixed_time"] = num(c.gemm_fixed_time_s * 1e6, 5) + " us";
  write_keys("attention", 4,
             {{"fwd_efficiency", c.attn_fwd_eff},
              {"bwd_efficiency", c.attn_bwd_eff},
              {"half_seq", c.attn_half_seq},
              {"half_head_dim", c.attn_half_head_dim}});
  if (is_fitted(rep, "compute.memory_bound_efficiency"))
    compute["memory_bound_efficiency"] = num(c.membound_eff, 4);
  if (is_fitted(rep, "compute.launch_overhead"))
    compute["launch_overhead"] = num(c.launch_overhead_s * 1e6, 4) + " us";
  if (is_fitted(rep, "compute.comm_sms")) compute["comm_sms"] = c.comm_sms;
  if (is_fitted(rep, "compute.gemm_table")) {
    YAML::Node table(YAML::NodeType::Sequence);
    for (const GemmPoint& p : c.gemm_table) {
      YAML::Node e = flow_map();
      e["m"] = p.m;
      e["n"] = p.n;
      e["k"] = p.k;
      e["dtype"] = dtype_name(p.dtype);
      e["throughput"] = num(p.flop_per_s / 1e12, 6) + " TFLOP/s";
      table.push_back(e);
    }
    compute["gemm_table"] = table;
  }
  std::string src = fmt::format(
      "stepcast fit of {} ({}, measured {}): {}", m.file, m.provenance.gpu_name,
      m.provenance.date_utc.empty() ? "date not recorded" : m.provenance.date_utc, m.source);
  if (!base.compute.source.empty()) src += "; values not fitted: " + base.compute.source;
  compute["source"] = src;
}

// gpu.memory_reserved and collectives.communicator_memory, when fitted.
void write_memory(YAML::Node& doc, const FitReport& rep) {
  if (is_fitted(rep, "gpu.memory_reserved")) {
    if (!doc["gpu"].IsMap()) doc["gpu"] = YAML::Node(YAML::NodeType::Map);
    doc["gpu"]["memory_reserved"] =
        fmt::format("{:.0f} MiB", rep.memory_reserved_bytes / 1048576.0);
  }

  if (is_fitted(rep, "collectives.communicator_memory")) {
    if (!doc["collectives"].IsMap()) doc["collectives"] = YAML::Node(YAML::NodeType::Map);
    YAML::Node list(YAML::NodeType::Sequence);
    for (const CommunicatorMemory& e : rep.communicator_memory) {
      YAML::Node n = flow_map();
      n["ranks"] = e.ranks;
      n["nodes"] = e.nodes;
      n["memory"] = fmt::format("{:.0f} MiB", e.bytes / 1048576.0);
      if (!e.source.empty()) n["source"] = e.source;
      list.push_back(n);
    }
    doc["collectives"]["communicator_memory"] = list;
  }
}

// collectives.calibrated: the base's entries the fit did not replace, then the fitted ones.
void write_calibrated(YAML::Node& doc, const HwProfile& base, const FitReport& rep) {
  if (!rep.calibrated.empty()) {
    YAML::Node coll = doc["collectives"];
    if (!coll.IsMap()) {
      coll = YAML::Node(YAML::NodeType::Map);
      doc["collectives"] = coll;
    }
    // A fit replaces the base's entries of the same op, shape and algorithm (a Ring sweep
    // leaves the NVLS entries alone: they answer where the model runs NVLS).
    std::set<std::tuple<std::string, int, int, CollAlgo>> refit;
    for (const CollectiveCalib& e : rep.calibrated) refit.insert({e.op, e.ranks, e.nodes, e.algo});
    YAML::Node list(YAML::NodeType::Sequence);
    // One calibrated entry as a flow mapping (keys of sim/cluster/params.h); the source is
    // written whenever it is known (fitted entries always carry one).
    auto entry = [&](const CollectiveCalib& e) {
      YAML::Node n = flow_map();
      n["op"] = e.op;
      n["algorithm"] = algo_name(e.algo);
      n["ranks"] = e.ranks;
      n["nodes"] = e.nodes;
      n["min_size"] = num(e.min_bytes, 15) + " B";
      n["max_size"] = num(e.max_bytes, 15) + " B";
      n["latency"] = num(e.latency_s * 1e6, 6) + " us";
      n["busbw"] = num(e.busbw_bytes_per_s / 1e9, 6) + " GB/s";
      if (!e.source.empty()) n["source"] = e.source;
      return n;
    };
    for (const CollectiveCalib& e : base.collectives.calibrated) {
      if (refit.count({e.op, e.ranks, e.nodes, e.algo})) continue;  // replaced below
      list.push_back(entry(e));
    }
    for (const CollectiveCalib& e : rep.calibrated) list.push_back(entry(e));
    coll["calibrated"] = list;
  }
}

}  // namespace

void write_yaml(const HwProfile& base, const FitReport& rep, const Measurements& m,
                const std::string& out_yaml) {
  YAML::Node doc = load_yaml_file(base.file);
  write_compute(doc, base, rep, m);
  write_memory(doc, rep);
  write_calibrated(doc, base, rep);

  YAML::Emitter em;
  em.SetIndent(2);
  em << doc;
  STEPCAST_CHECK(em.good(), "YAML emitter: " + em.GetLastError());
  // The base's text with only the fitted keys rewritten, so its comments (the sources of the
  // values not fitted) stay; the whole document when that cannot be done in place. Read
  // before the output is opened: the output may be the base itself (a profile refitted in
  // place).
  std::ifstream in(base.file);
  std::stringstream base_text;
  base_text << in.rdbuf();
  in.close();
  const YAML::Node base_doc = load_yaml_file(base.file);
  std::ofstream f(out_yaml);
  if (!f) throw InputError(InputIssue{out_yaml, 0, 0, "", "cannot write the output profile"});
  const std::optional<std::string> patched =
      patch_yaml_text(base_text.str(), base_doc, doc, "fitted");
  std::istringstream header(rep.text());
  f << "# Written by `stepcast fit` on " << utc_now() << ".\n";
  if (patched)
    f << "# The text and comments of the base profile " << base.file
      << " are kept; each key this\n# fit changed ends with `# fitted`, naming the value it "
         "replaces (the comments above\n# such a key describe that base value).\n#\n";
  else
    f << "# The comments of the base profile are not carried over: see " << base.file
      << "\n# for the sources of the values not fitted here.\n#\n";
  for (std::string line; std::getline(header, line);) f << "# " << line << "\n";
  if (patched)
    f << "\n" << *patched;
  else
    f << em.c_str() << "\n";
  if (!f) throw InputError(InputIssue{out_yaml, 0, 0, "", "error writing the output profile"});
}

}  // namespace fit_detail

std::string FitReport::text() const {
  std::ostringstream o;
  o << "stepcast fit: " << measurements_file << " -> " << out_yaml << "\n";
  o << "  base profile: " << base_profile << "\n";
  o << "  measured on: " << (gpu_name.empty() ? "?" : gpu_name) << ", "
    << (date_utc.empty() ? "date not recorded" : date_utc) << "\n";
  if (!source.empty()) o << "  source: " << source << "\n";
  if (gemm_points + gemm_fp8_points > 0) {
    o << fmt::format(
        "  gemm: t = flops / (peak * {:.4f} * M/(M+{:.1f}) * n/(n+{:.1f}) * "
        "k/(k+{:.1f})) + {:.2f} us; fp8 ceiling {:.4f}\n",
        compute.gemm_max_eff, compute.gemm_half_m, compute.gemm_half_n, compute.gemm_half_k,
        compute.gemm_fixed_time_s * 1e6, compute.fp8_max_eff);
    if (compute.has_fp8_halves())
      o << fmt::format("        fp8's own half sizes: M {:.1f}, n {:.1f}, k {:.1f}\n",
                       compute.fp8_half_m, compute.fp8_half_n, compute.fp8_half_k);
    const auto in_table = std::count_if(gemm_residuals.begin(), gemm_residuals.end(),
                                        [](const GemmResidual& r) { return r.in_table; });
    o << fmt::format(
        "        {} bf16/fp16 + {} fp8 points: curve rms error {}, max {}; {} "
        "points off by > {} written to gemm_table",
        gemm_points, gemm_fp8_points, pct(gemm_rms_rel_err), pct(gemm_max_rel_err), in_table,
        pct(kTableTolerance));
    o << "\n";
  }
  if (grouped_gemm_points > 0)
    o << fmt::format(
        "  grouped gemm: grouped_efficiency {:.4f}: the geometric mean of t_model/t over {} "
        "points\n        (t_model: one GEMM per expert at the curve, 4 streams; from {:.4f} "
        "to {:.4f}); rms error {}, max {}\n",
        compute.gemm_grouped_eff, grouped_gemm_points, grouped_gemm_ratio_range[0],
        grouped_gemm_ratio_range[1], pct(grouped_gemm_rms_rel_err), pct(grouped_gemm_max_rel_err));
  if (attention_points[0] + attention_points[1] > 0) {
    o << fmt::format(
        "  attention ({}): eff = E * s/(s+{:.1f}) * d/(d+{:.1f}), E fwd {:.4f}, bwd {:.4f}\n",
        attention_backend, compute.attn_half_seq, compute.attn_half_head_dim, compute.attn_fwd_eff,
        compute.attn_bwd_eff);
    for (int d = 0; d < 2; ++d)
      if (attention_points[d])
        o << fmt::format("        {} {} points: rms error {}, max {}\n", attention_points[d],
                         d ? "bwd" : "fwd", pct(attention_rms_rel_err[d]),
                         pct(attention_max_rel_err[d]));
  }
  if (copy_bw_bytes_per_s > 0)
    o << fmt::format(
        "  memory: copy {:.1f} GB/s (fit max error {}) -> memory_bound_efficiency "
        "{:.4f}\n",
        copy_bw_bytes_per_s / 1e9, pct(copy_max_rel_err), compute.membound_eff);
  if (adam_bw_bytes_per_s > 0)
    o << fmt::format("  memory: adam-like update {:.1f} GB/s (fit max error {}), not written\n",
                     adam_bw_bytes_per_s / 1e9, pct(adam_max_rel_err));
  if (std::find(fitted.begin(), fitted.end(), "compute.launch_overhead") != fitted.end())
    o << fmt::format("  launch overhead: {:.2f} us\n", compute.launch_overhead_s * 1e6);
  if (memory_reserved_bytes > 0)
    o << fmt::format(
        "  gpu.memory_reserved: {:.0f} MiB in use before the memory benchmark (CUDA "
        "context, loaded modules)\n",
        memory_reserved_bytes / 1048576.0);
  for (const CommunicatorMemory& e : communicator_memory)
    o << fmt::format(
        "  communicator memory: {} ranks on {} node(s): {:.0f} MiB per GPU{}\n", e.ranks, e.nodes,
        e.bytes / 1048576.0,
        e.source.rfind("stepcast fit of " + measurements_file, 0) == 0 ? "" : " (base)");
  if (!comm_sms_estimates.empty())
    o << fmt::format("  comm_sms: {} (from {} overlap measurements)\n", compute.comm_sms,
                     comm_sms_estimates.size());
  for (const CollectiveFit& f : collectives) {
    o << fmt::format("  {} n={} N={} (algo {}): {} points\n", f.op, f.ranks, f.nodes, f.algo,
                     f.sizes_bytes.size());
    for (const CollectiveSegment& s : f.segments)
      o << fmt::format(
          "    [{}, {}]: latency {:.2f} us, busbw {:.1f} GB/s, max error {} over "
          "{} points{}\n",
          format_bytes(s.min_bytes), format_bytes(s.max_bytes), s.latency_s * 1e6,
          s.busbw_bytes_per_s / 1e9, pct(s.max_rel_err), s.points,
          s.latency_bound ? " (latency-bound)" : "");
  }
  for (const std::string& w : warnings) o << "  warning: " << w << "\n";
  return o.str();
}

}  // namespace stepcast
