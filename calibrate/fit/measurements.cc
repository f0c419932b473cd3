#include "calibrate/fit/measurements.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/busbw.h"
#include "model/error.h"
#include "sim/io/json_locator.h"

namespace stepcast {

using nlohmann::json;

double busbw_factor(const std::string& op, int ranks) {
  const std::optional<BusOp> b = bus_op_named(op);
  STEPCAST_CHECK(b.has_value(), "unknown collective op " + op);
  return busbw_factor(*b, ranks);
}

const std::vector<std::string>& collective_op_names() {
  static const std::vector<std::string> names = {"allreduce",  "reduce_scatter", "allgather",
                                                 "all_to_all", "broadcast",      "send_recv"};
  return names;
}

const std::vector<std::string>& grouped_gemm_phase_names() {
  static const std::vector<std::string> names = {"fwd", "recompute", "bwd_input", "bwd_weight"};
  return names;
}

namespace {

// Walks the document, collecting issues keyed by JSON pointer.
class Reader {
 public:
  Reader(std::string file, IssueList& issues) : file_(std::move(file)), issues_(issues) {}

  void error(const std::string& pointer, const std::string& message) {
    issues_.add(InputIssue{file_, 0, 0, pointer, message});
  }

  // Every key known; a key that is a known key without its unit suffix ("time" for
  // "time_us") is reported as a missing unit; others get the closest known key.
  bool expect_object(const json& j, const std::string& ptr, const std::vector<std::string>& known) {
    if (!j.is_object()) {
      error(ptr.empty() ? "/" : ptr, std::string("expected an object, got ") + j.type_name());
      return false;
    }
    for (const auto& [key, value] : j.items()) {
      bool ok = false;
      for (const auto& k : known) ok = ok || k == key;
      if (ok) continue;
      std::string with_unit;
      for (const auto& k : known)
        if (k.size() > key.size() + 1 && k.compare(0, key.size(), key) == 0 && k[key.size()] == '_')
          with_unit = k;
      if (!with_unit.empty() && value.is_number()) {
        error(ptr + "/" + key, fmt::format("a number without a unit: name the unit in the key "
                                           "(expected \"{}\")",
                                           with_unit));
        continue;
      }
      const std::string near = closest_match(key, known);
      error(ptr + "/" + key,
            near.empty() ? "unknown key" : fmt::format("unknown key (did you mean \"{}\"?)", near));
    }
    return true;
  }

  const json* required(const json& obj, const std::string& ptr, const std::string& key) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      error(ptr + "/" + key, "missing required key");
      return nullptr;
    }
    return &*it;
  }

  // A finite number > 0 (or >= 0 when allow_zero).
  std::optional<double> positive(const json& obj, const std::string& ptr, const std::string& key,
                                 bool is_required = true, bool allow_zero = false) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (is_required) error(ptr + "/" + key, "missing required key");
      return std::nullopt;
    }
    if (!it->is_number()) {
      error(ptr + "/" + key, std::string("expected a number, got ") + it->type_name());
      return std::nullopt;
    }
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0 || (!allow_zero && v == 0)) {
      error(ptr + "/" + key, fmt::format("expected a {} number, got {}",
                                         allow_zero ? "non-negative" : "positive", v));
      return std::nullopt;
    }
    return v;
  }

  std::optional<std::int64_t> integer(const json& obj, const std::string& ptr,
                                      const std::string& key, std::int64_t min,
                                      bool is_required = true) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (is_required) error(ptr + "/" + key, "missing required key");
      return std::nullopt;
    }
    if (!it->is_number_integer() || it->get<std::int64_t>() < min) {
      error(ptr + "/" + key, fmt::format("expected an integer >= {}, got {}", min, it->dump()));
      return std::nullopt;
    }
    return it->get<std::int64_t>();
  }

  std::optional<std::string> string(const json& obj, const std::string& ptr, const std::string& key,
                                    bool is_required = true,
                                    const std::vector<std::string>& allowed = {}) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (is_required) error(ptr + "/" + key, "missing required key");
      return std::nullopt;
    }
    if (!it->is_string()) {
      error(ptr + "/" + key, std::string("expected a string, got ") + it->type_name());
      return std::nullopt;
    }
    const std::string s = it->get<std::string>();
    if (!allowed.empty()) {
      bool ok = false;
      std::string list;
      for (const auto& a : allowed) {
        ok = ok || a == s;
        list += (list.empty() ? "" : ", ") + a;
      }
      if (!ok) {
        error(ptr + "/" + key, fmt::format("expected one of {}, got \"{}\"", list, s));
        return std::nullopt;
      }
    }
    return s;
  }

  // A derived number that must agree with the value computed from the raw ones: relative
  // tolerance 2% plus `abs_tol` (published tables round to 2 decimals).
  void consistent(const json& obj, const std::string& ptr, const std::string& key, double expected,
                  double abs_tol, const std::string& formula) {
    auto v = positive(obj, ptr, key, false, true);
    if (!v) return;
    if (std::abs(*v - expected) > 0.02 * expected + abs_tol)
      error(ptr + "/" + key,
            fmt::format("inconsistent: {} but {} gives {:.6g}", *v, formula, expected));
  }

 private:
  std::string file_;
  IssueList& issues_;
};

std::optional<DType> gemm_dtype(Reader& r, const json& obj, const std::string& ptr) {
  auto s = r.string(obj, ptr, "dtype", true, {"bf16", "fp16", "fp8"});
  if (!s) return std::nullopt;
  if (*s == "fp16") return DType::kFp16;
  if (*s == "fp8") return DType::kFp8;
  return DType::kBf16;
}

}  // namespace

static Measurements parse_unlocated(const std::string& text, const std::string& file);

// Every issue (keyed by its JSON pointer) gets the line and column of its value in `text`.
Measurements parse_measurements(const std::string& text, const std::string& file) {
  try {
    return parse_unlocated(text, file);
  } catch (const InputError& e) {
    std::vector<InputIssue> issues = e.issues();
    locate_json_pointer_issues(issues, text);
    throw InputError(std::move(issues));
  }
}

namespace {

// Provenance: which GPUs, software and when.
void parse_provenance(Reader& r, const json& doc, Measurements& out) {
  if (const json* p = r.required(doc, "", "provenance")) {
    const std::string pp = "/provenance";
    if (r.expect_object(
            *p, pp,
            {"gpu_name", "gpu_count", "nodes", "cuda_driver_version", "cuda_runtime_version",
             "nccl_version", "cublaslt_version", "hostname", "date_utc", "gpus"})) {
      auto& pv = out.provenance;
      if (auto s = r.string(*p, pp, "gpu_name")) pv.gpu_name = *s;
      if (auto c = r.integer(*p, pp, "gpu_count", 1)) pv.gpu_count = static_cast<int>(*c);
      if (auto c = r.integer(*p, pp, "nodes", 1, false)) pv.nodes = static_cast<int>(*c);
      if (auto s = r.string(*p, pp, "cuda_driver_version", false)) pv.cuda_driver_version = *s;
      if (auto s = r.string(*p, pp, "cuda_runtime_version", false)) pv.cuda_runtime_version = *s;
      if (auto s = r.string(*p, pp, "nccl_version", false)) pv.nccl_version = *s;
      if (auto s = r.string(*p, pp, "hostname", false)) pv.hostname = *s;
      if (auto s = r.string(*p, pp, "date_utc", false)) pv.date_utc = *s;
      if (auto it = p->find("gpus"); it != p->end()) {
        if (!it->is_array()) {
          r.error(pp + "/gpus", "expected an array");
        } else {
          for (std::size_t i = 0; i < it->size(); ++i) {
            const json& g = (*it)[i];
            const std::string gp = fmt::format("{}/gpus/{}", pp, i);
            if (!r.expect_object(g, gp,
                                 {"index", "name", "compute_capability", "sm_count", "memory_bytes",
                                  "sm_clock_max_mhz", "memory_clock_max_mhz", "pci_bus_id"}))
              continue;
            auto name = r.string(g, gp, "name");
            // One profile describes one GPU model: a mixed run cannot be fitted.
            if (name && !pv.gpu_name.empty() && *name != pv.gpu_name)
              r.error(gp + "/name", fmt::format("mixed GPUs: \"{}\" differs from "
                                                "/provenance/gpu_name \"{}\"",
                                                *name, pv.gpu_name));
            if (auto sms = r.integer(g, gp, "sm_count", 1, false); sms && i == 0)
              pv.sm_count = static_cast<int>(*sms);
            r.positive(g, gp, "memory_bytes", false);
            r.positive(g, gp, "sm_clock_max_mhz", false);
            r.positive(g, gp, "memory_clock_max_mhz", false);
          }
        }
      }
    }
  }
}

// The array at `key` of `parent` (at JSON pointer `ptr`): nullptr when absent, or (reported)
// when not an array.
const json* array_at(Reader& r, const json& parent, const std::string& ptr,
                     const std::string& key) {
  auto it = parent.find(key);
  if (it == parent.end()) return nullptr;
  if (!it->is_array()) {
    r.error(ptr + "/" + key, std::string("expected an array, got ") + it->type_name());
    return nullptr;
  }
  return &*it;
}

// GEMM timings: one shape each.
void parse_gemm(Reader& r, const json& doc, Measurements& out) {
  if (const json* a = array_at(r, doc, "", "gemm")) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json& g = (*a)[i];
      const std::string gp = fmt::format("/gemm/{}", i);
      if (!r.expect_object(g, gp,
                           {"m", "n", "k", "batch", "dtype", "layout", "origin", "time_us",
                            "flop_per_s", "repeats", "source"}))
        continue;
      auto m = r.integer(g, gp, "m", 1), n = r.integer(g, gp, "n", 1), k = r.integer(g, gp, "k", 1);
      auto batch = r.integer(g, gp, "batch", 1, false);
      auto dtype = gemm_dtype(r, g, gp);
      auto t = r.positive(g, gp, "time_us");
      r.string(g, gp, "layout", false);
      r.string(g, gp, "origin", false);
      r.string(g, gp, "source", false);
      r.integer(g, gp, "repeats", 1, false);
      if (!(m && n && k && dtype && t)) continue;
      MeasuredGemm mg{*m, *n, *k, batch.value_or(1), *dtype, *t * 1e-6, 0, gp};
      mg.flop_per_s = 2.0 * mg.m * mg.n * mg.k * mg.batch / mg.time_s;
      r.consistent(g, gp, "flop_per_s", mg.flop_per_s, 0, "2*m*n*k*batch/time_us");
      out.gemm.push_back(mg);
    }
  }
}

// Grouped GEMM timings: one grouped GEMM each (MeasuredGroupedGemm).
void parse_grouped_gemm(Reader& r, const json& doc, Measurements& out) {
  const json* a = array_at(r, doc, "", "grouped_gemm");
  if (!a) return;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const json& g = (*a)[i];
    const std::string gp = fmt::format("/grouped_gemm/{}", i);
    if (!r.expect_object(g, gp,
                         {"m", "n", "k", "groups", "dtype", "phase", "layout", "streams", "origin",
                          "time_us", "flop_per_s", "repeats", "source"}))
      continue;
    auto m = r.integer(g, gp, "m", 1), n = r.integer(g, gp, "n", 1), k = r.integer(g, gp, "k", 1);
    auto groups = r.integer(g, gp, "groups", 1);
    auto dtype = gemm_dtype(r, g, gp);
    auto phase = r.string(g, gp, "phase", true, grouped_gemm_phase_names());
    auto t = r.positive(g, gp, "time_us");
    r.string(g, gp, "layout", false);
    r.integer(g, gp, "streams", 1, false);
    r.string(g, gp, "origin", false);
    r.string(g, gp, "source", false);
    r.integer(g, gp, "repeats", 1, false);
    if (!(m && n && k && groups && dtype && phase && t)) continue;
    MeasuredGroupedGemm mg{*m, *n, *k, *groups, *dtype, *phase, *t * 1e-6, 0, gp};
    mg.flop_per_s = 2.0 * mg.m * mg.n * mg.k * mg.groups / mg.time_s;
    r.consistent(g, gp, "flop_per_s", mg.flop_per_s, 0, "2*m*n*k*groups/time_us");
    out.grouped_gemm.push_back(std::move(mg));
  }
}

// Fused attention timings: one shape, backend and direction each (MeasuredAttention).
void parse_attention(Reader& r, const json& doc, Measurements& out) {
  const json* a = array_at(r, doc, "", "attention");
  if (!a) return;
  for (std::size_t i = 0; i < a->size(); ++i) {
    const json& e = (*a)[i];
    const std::string ep = fmt::format("/attention/{}", i);
    if (!r.expect_object(e, ep,
                         {"backend", "causal", "direction", "batch", "heads", "kv_heads", "seq_q",
                          "seq_kv", "head_dim", "dtype", "time_us", "flop_per_s", "repeats"}))
      continue;
    MeasuredAttention ma;
    ma.pointer = ep;
    auto backend = r.string(e, ep, "backend");
    auto direction = r.string(e, ep, "direction", true, {"fwd", "bwd"});
    r.string(e, ep, "dtype", false, {"bf16", "fp16"});
    r.integer(e, ep, "repeats", 1, false);
    bool causal_ok = true;
    if (auto it = e.find("causal"); it == e.end() || !it->is_boolean()) {
      r.error(ep + "/causal", it == e.end()
                                  ? "missing required key"
                                  : std::string("expected true or false, got ") + it->dump());
      causal_ok = false;
    } else {
      ma.shape.causal = it->get<bool>();
    }
    auto batch = r.integer(e, ep, "batch", 1), heads = r.integer(e, ep, "heads", 1),
         kv_heads = r.integer(e, ep, "kv_heads", 1), seq_q = r.integer(e, ep, "seq_q", 1),
         seq_kv = r.integer(e, ep, "seq_kv", 1), head_dim = r.integer(e, ep, "head_dim", 1);
    auto t = r.positive(e, ep, "time_us");
    if (!(backend && direction && causal_ok && batch && heads && kv_heads && seq_q && seq_kv &&
          head_dim && t))
      continue;
    if (*heads % *kv_heads != 0) {
      r.error(ep + "/kv_heads",
              fmt::format("heads ({}) must be a multiple of kv_heads ({})", *heads, *kv_heads));
      continue;
    }
    ma.backend = *backend;
    AttentionShape& sh = ma.shape;
    sh.backward = *direction == "bwd";
    sh.batch = *batch;
    sh.heads = *heads;
    sh.kv_heads = *kv_heads;
    sh.seq_q = *seq_q;
    sh.seq_kv = *seq_kv;
    sh.head_dim = *head_dim;
    ma.time_s = *t * 1e-6;
    auto d = [](std::int64_t x) { return static_cast<double>(x); };
    ma.flops = flash_attention_flops(d(sh.batch), d(sh.heads), d(sh.seq_q), d(sh.seq_kv),
                                     2 * d(sh.head_dim), sh.causal, sh.backward);
    r.consistent(e, ep, "flop_per_s", ma.flops / ma.time_s, 0,
                 "4*batch*heads*seq_q*seq_kv*head_dim (x0.5 causal, x2.5 bwd)/time_us");
    out.attention.push_back(ma);
  }
}

// Memory: the launch overhead, the memory in use before the benchmark, the bandwidth kernels.
void parse_memory(Reader& r, const json& doc, Measurements& out) {
  if (auto it = doc.find("memory"); it != doc.end()) {
    const std::string mp = "/memory";
    if (r.expect_object(*it, mp, {"kernels", "launch_overhead_us", "context_memory_bytes"})) {
      if (it->contains("launch_overhead_us")) {
        if (auto v = r.positive(*it, mp, "launch_overhead_us")) out.launch_overhead_s = *v * 1e-6;
      }
      if (it->contains("context_memory_bytes")) {
        if (auto v = r.positive(*it, mp, "context_memory_bytes")) out.context_memory_bytes = *v;
      }
      if (const json* a = array_at(r, *it, mp, "kernels")) {
        for (std::size_t i = 0; i < a->size(); ++i) {
          const json& e = (*a)[i];
          const std::string ep = fmt::format("{}/kernels/{}", mp, i);
          if (!r.expect_object(e, ep,
                               {"kernel", "bytes_read", "bytes_written", "time_us", "bytes_per_s"}))
            continue;
          auto kernel = r.string(e, ep, "kernel", true, {"copy", "adam"});
          auto rd = r.positive(e, ep, "bytes_read"),
               wr = r.positive(e, ep, "bytes_written", true, true);
          auto t = r.positive(e, ep, "time_us");
          if (!(kernel && rd && wr && t)) continue;
          r.consistent(e, ep, "bytes_per_s", (*rd + *wr) / (*t * 1e-6), 0,
                       "(bytes_read+bytes_written)/time_us");
          out.memory.push_back({*kernel, *rd, *wr, *t * 1e-6, ep});
        }
      }
    }
  }
}

// Collectives: nccl-tests-like rows.
void parse_collectives(Reader& r, const json& doc, Measurements& out) {
  if (const json* a = array_at(r, doc, "", "collectives")) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json& c = (*a)[i];
      const std::string cp = fmt::format("/collectives/{}", i);
      if (!r.expect_object(c, cp,
                           {"op", "ranks", "nodes", "algo", "dtype", "size_bytes", "time_us",
                            "algbw_GBps", "busbw_GBps", "in_place", "source"}))
        continue;
      auto op = r.string(c, cp, "op", true, collective_op_names());
      auto ranks = r.integer(c, cp, "ranks", 2);
      auto nodes = r.integer(c, cp, "nodes", 1);
      auto algo = r.string(c, cp, "algo", false);
      r.string(c, cp, "dtype", false);
      r.string(c, cp, "source", false);
      if (auto ip = c.find("in_place"); ip != c.end() && !ip->is_boolean())
        r.error(cp + "/in_place", "expected true or false");
      auto size = r.positive(c, cp, "size_bytes");
      auto t = r.positive(c, cp, "time_us");
      if (ranks && nodes && *nodes > *ranks)
        r.error(cp + "/nodes", fmt::format("{} nodes for {} ranks", *nodes, *ranks));
      if (!(op && ranks && nodes && size && t)) continue;
      const double algbw = *size / (*t * 1e-6) / 1e9;
      // Published tables print GB/s with 2 decimals: absolute tolerance 0.0051 GB/s.
      r.consistent(c, cp, "algbw_GBps", algbw, 0.0051, "size_bytes/time_us");
      r.consistent(c, cp, "busbw_GBps", algbw * busbw_factor(*op, static_cast<int>(*ranks)), 0.0051,
                   "algbw * nccl-tests busbw factor");
      out.collectives.push_back({*op, static_cast<int>(*ranks), static_cast<int>(*nodes),
                                 algo.value_or("default"), *size, *t * 1e-6, cp});
    }
  }
}

// Communicators: the GPU memory each NCCL communicator holds.
void parse_communicators(Reader& r, const json& doc, Measurements& out) {
  if (const json* a = array_at(r, doc, "", "communicators")) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json& c = (*a)[i];
      const std::string cp = fmt::format("/communicators/{}", i);
      if (!r.expect_object(c, cp, {"ranks", "nodes", "algo", "memory_bytes_per_gpu"})) continue;
      auto ranks = r.integer(c, cp, "ranks", 2);
      auto nodes = r.integer(c, cp, "nodes", 1);
      auto algo = r.string(c, cp, "algo", false);
      auto bytes = r.positive(c, cp, "memory_bytes_per_gpu");
      if (ranks && nodes && *nodes > *ranks)
        r.error(cp + "/nodes", fmt::format("{} nodes for {} ranks", *nodes, *ranks));
      else if (ranks && nodes && bytes)
        out.communicators.push_back({static_cast<int>(*ranks), static_cast<int>(*nodes),
                                     algo.value_or("default"), *bytes, cp});
    }
  }
}

// Overlap: a GEMM alone and beside an all-reduce.
void parse_overlap(Reader& r, const json& doc, Measurements& out) {
  if (const json* a = array_at(r, doc, "", "overlap")) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json& o = (*a)[i];
      const std::string op = fmt::format("/overlap/{}", i);
      if (!r.expect_object(
              o, op,
              {"m", "n", "k", "dtype", "ranks", "allreduce_size_bytes", "allreduce_alone_time_us",
               "gemm_alone_time_us", "gemm_overlapped_time_us"}))
        continue;
      auto m = r.integer(o, op, "m", 1), n = r.integer(o, op, "n", 1), k = r.integer(o, op, "k", 1);
      auto dtype = gemm_dtype(r, o, op);
      auto ranks = r.integer(o, op, "ranks", 2);
      auto bytes = r.positive(o, op, "allreduce_size_bytes");
      r.positive(o, op, "allreduce_alone_time_us", false);
      auto alone = r.positive(o, op, "gemm_alone_time_us");
      auto over = r.positive(o, op, "gemm_overlapped_time_us");
      if (!(m && n && k && dtype && ranks && bytes && alone && over)) continue;
      out.overlap.push_back(
          {*m, *n, *k, *dtype, static_cast<int>(*ranks), *bytes, *alone * 1e-6, *over * 1e-6, op});
    }
  }
}

}  // namespace

static Measurements parse_unlocated(const std::string& text, const std::string& file) {
  const json doc = parse_json(text, file);
  IssueList issues;
  Reader r(file, issues);
  Measurements out;
  out.file = file;
  if (!r.expect_object(
          doc, "",
          {"schema", "source", "subcommands", "provenance", "gemm", "grouped_gemm", "memory",
           "attention", "collectives", "communicators", "overlap", "notes"})) {
    issues.throw_if_any();
  }
  if (auto schema = r.string(doc, "", "schema"); schema && *schema != kMeasurementsSchema)
    r.error("/schema", fmt::format("expected \"{}\", got \"{}\"", kMeasurementsSchema, *schema));
  if (auto s = r.string(doc, "", "source")) out.source = *s;

  parse_provenance(r, doc, out);
  parse_gemm(r, doc, out);
  parse_grouped_gemm(r, doc, out);
  parse_memory(r, doc, out);
  parse_attention(r, doc, out);
  parse_collectives(r, doc, out);
  parse_communicators(r, doc, out);
  parse_overlap(r, doc, out);
  if (issues.empty() && out.gemm.empty() && out.grouped_gemm.empty() && out.memory.empty() &&
      out.attention.empty() && out.collectives.empty() && out.overlap.empty() &&
      out.communicators.empty() && !out.launch_overhead_s && !out.context_memory_bytes)
    r.error("",
            "no measurements: gemm, grouped_gemm, memory, attention, collectives and overlap "
            "are all empty");
  issues.throw_if_any();
  return out;
}

Measurements load_measurements(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError(InputIssue{path, 0, 0, "", "cannot open the measurements file"});
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_measurements(ss.str(), path);
}

Measurements load_measurements(const std::vector<std::string>& paths) {
  STEPCAST_CHECK(!paths.empty(), "load_measurements: no file");
  Measurements out = load_measurements(paths[0]);
  for (std::size_t i = 1; i < paths.size(); ++i) {
    Measurements m = load_measurements(paths[i]);
    if (m.provenance.gpu_name != out.provenance.gpu_name)
      throw InputError(InputIssue{
          m.file, 0, 0, "/provenance/gpu_name",
          fmt::format("measured on \"{}\", but {} was measured on \"{}\": one fit takes one "
                      "GPU model",
                      m.provenance.gpu_name, out.file, out.provenance.gpu_name)});
    auto append = [](auto& to, auto& from) {
      to.insert(to.end(), std::make_move_iterator(from.begin()),
                std::make_move_iterator(from.end()));
    };
    out.file += ", " + m.file;
    if (m.source != out.source) out.source += ", " + m.source;
    if (out.provenance.date_utc.empty()) out.provenance.date_utc = m.provenance.date_utc;
    if (!out.launch_overhead_s) out.launch_overhead_s = m.launch_overhead_s;
    if (!out.context_memory_bytes) out.context_memory_bytes = m.context_memory_bytes;
    append(out.gemm, m.gemm);
    append(out.grouped_gemm, m.grouped_gemm);
    append(out.memory, m.memory);
    append(out.attention, m.attention);
    append(out.collectives, m.collectives);
    append(out.communicators, m.communicators);
    append(out.overlap, m.overlap);
  }
  return out;
}

}  // namespace stepcast
