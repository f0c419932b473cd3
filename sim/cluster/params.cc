// Parsers of a hardware profile's `compute:` and `collectives:` sections (keys documented
// in params.h). Strict like every loader: unknown keys (with a suggestion), wrong types,
// out-of-range values and bare numbers where a unit is needed are reported to the reader's
// IssueList; nothing is thrown here, the profile loader throws once for the whole file.
#include "sim/cluster/params.h"

#include <limits>

#include <fmt/format.h>

#include "model/error.h"

namespace stepcast {

const std::vector<std::string>& collective_algorithm_names() {
  static const std::vector<std::string> names = {"ring",      "tree", "nvls",
                                                 "nvls_tree", "pat",  "direct"};
  return names;
}

CollAlgo collective_algorithm(const std::string& name) {
  const auto& n = collective_algorithm_names();
  for (std::size_t i = 0; i < n.size(); ++i)
    if (n[i] == name) return static_cast<CollAlgo>(i);
  STEPCAST_CHECK(false, "unknown collective algorithm '" + name + "'");
  return CollAlgo::kRing;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A profile list of entries: `list` must be a YAML list at `path` (else the error `shape`
// names), each entry a mapping with keys among `keys`; `entry(e, ep)` reads the valid ones
// (ep: the entry's path, "path[i]"). `out` is cleared first: a list replaces the default.
template <typename T, typename Entry>
void parse_entries(YamlReader& r, const YAML::Node& list, const std::string& path,
                   const char* shape, const std::vector<std::string>& keys, std::vector<T>& out,
                   Entry entry) {
  if (!list.IsSequence()) {
    r.error(list, path, std::string("expected a list of ") + shape);
    return;
  }
  out.clear();
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node e = list[i];
    const std::string ep = path + "[" + std::to_string(i) + "]";
    if (r.expect_map(e, ep, keys)) entry(e, ep);
  }
}

// Sets `out` when the getter found a valid value; leaves the default otherwise.
template <typename T, typename U>
void set_if(const std::optional<U>& v, T& out) {
  if (v) out = static_cast<T>(*v);
}

// Efficiencies are fractions of a datasheet peak, in [0.01, 1]: a kernel below 1% of its
// peak is no rate any GPU kernel runs at (and its tasks would take years of simulated time).
std::optional<double> get_fraction(YamlReader& r, const YAML::Node& map, const std::string& path,
                                   const std::string& key) {
  return r.get_double(map, path, key, 0.01, 1.0);
}

// compute.gemm.grouped_efficiency: a factor of the dense curve's time, in (0, 2]: 0 would
// make grouped GEMMs take forever, and a grouped GEMM more than twice as fast as its own
// experts' GEMMs at the dense curve is no measurement (the fit keeps its value in range).
std::optional<double> get_grouped_efficiency(YamlReader& r, const YAML::Node& map,
                                             const std::string& path) {
  const auto v = r.get_double(map, path, "grouped_efficiency", -kInf, kInf);
  if (v && !(*v > 0 && *v <= 2)) {
    r.error(map["grouped_efficiency"], join_path(path, "grouped_efficiency"),
            fmt::format("expected a number in (0, 2] (1: Transformer Engine's per-expert "
                        "GEMMs at the dense curve), got {}",
                        *v));
    return std::nullopt;
  }
  return v;
}

std::optional<DType> get_dtype(YamlReader& r, const YAML::Node& map, const std::string& path,
                               const std::string& key) {
  auto s = r.get_enum(map, path, key, {"bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32"});
  if (!s) return std::nullopt;
  if (*s == "bf16") return DType::kBf16;
  if (*s == "fp16") return DType::kFp16;
  if (*s == "fp8") return DType::kFp8;
  if (*s == "mxfp8") return DType::kMxfp8;
  if (*s == "nvfp4") return DType::kNvfp4;
  return DType::kFp32;
}

void parse_gemm_table(YamlReader& r, const YAML::Node& list, const std::string& path,
                      std::vector<GemmPoint>& out) {
  parse_entries(
      r, list, path, "{m, n, k, dtype, throughput} entries", {"m", "n", "k", "dtype", "throughput"},
      out, [&](const YAML::Node& e, const std::string& ep) {
        GemmPoint g;
        bool ok = true;
        for (const char* key : {"m", "n", "k", "throughput"}) ok = r.require(e, ep, key) && ok;
        constexpr std::int64_t kMaxDim = std::int64_t{1} << 40;
        auto m = r.get_int(e, ep, "m", 1, kMaxDim);
        auto n = r.get_int(e, ep, "n", 1, kMaxDim);
        auto k = r.get_int(e, ep, "k", 1, kMaxDim);
        auto d = get_dtype(r, e, ep, "dtype");
        auto t = r.get_quantity(e, ep, "throughput", Dimension::kFlopRate);
        if (!ok || !m || !n || !k || !t) return;
        if (e["dtype"] && !d) return;
        if (*t <= 0) {
          r.error(e["throughput"], join_path(ep, "throughput"), "expected a positive compute rate");
          return;
        }
        g.m = *m;
        g.n = *n;
        g.k = *k;
        g.dtype = d.value_or(DType::kBf16);
        g.flop_per_s = *t;
        out.push_back(g);
      });
}

const std::vector<std::string> kCollectiveOps = {"allreduce",  "reduce_scatter", "allgather",
                                                 "all_to_all", "broadcast",      "send_recv"};

// The algorithms the model can pick for an op on `nodes` nodes (sim/cost/collective.cc): an
// entry of another one would never match.
bool algo_allowed(const std::string& op, CollAlgo a, int nodes) {
  switch (a) {
    case CollAlgo::kRing:
      return op == "allreduce" || op == "reduce_scatter" || op == "allgather" || op == "broadcast";
    case CollAlgo::kTree: return op == "allreduce";
    case CollAlgo::kNvls: return op == "allreduce" && nodes == 1;
    case CollAlgo::kNvlsTree: return op == "allreduce" && nodes > 1;
    case CollAlgo::kPat: return (op == "reduce_scatter" || op == "allgather") && nodes > 1;
    case CollAlgo::kDirect: return op == "all_to_all" || op == "send_recv";
  }
  return false;
}

void parse_calibrated(YamlReader& r, const YAML::Node& list, const std::string& path,
                      std::vector<CollectiveCalib>& out) {
  parse_entries(
      r, list, path, "calibrated collective entries",
      {"op", "algorithm", "ranks", "nodes", "min_size", "max_size", "latency", "busbw", "source"},
      out, [&](const YAML::Node& e, const std::string& ep) {
        bool ok = true;
        for (const char* key : {"op", "ranks", "nodes", "latency", "busbw"})
          ok = r.require(e, ep, key) && ok;
        // An entry holds one algorithm's measurements and applies only where the model picks
        // that algorithm, so it must say which (files written before the key: add it).
        if (!e["algorithm"]) {
          r.error(e, join_path(ep, "algorithm"),
                  "missing key: name the algorithm the entry was measured with (ring | tree | "
                  "nvls | nvls_tree | pat | direct; all_to_all and send_recv: direct), as "
                  "`stepcast fit` writes it");
          ok = false;
        }
        CollectiveCalib c;
        auto op = r.get_enum(e, ep, "op", kCollectiveOps);
        auto algo = r.get_enum(e, ep, "algorithm", collective_algorithm_names());
        auto ranks = r.get_int(e, ep, "ranks", 2, 1 << 24);
        auto nodes = r.get_int(e, ep, "nodes", 1, 1 << 24);
        auto min_b = r.get_quantity(e, ep, "min_size", Dimension::kBytes);
        auto max_b = r.get_quantity(e, ep, "max_size", Dimension::kBytes);
        auto lat = r.get_quantity(e, ep, "latency", Dimension::kTime);
        auto bw = r.get_quantity(e, ep, "busbw", Dimension::kBandwidth);
        auto src = r.get_string(e, ep, "source");
        if (!ok || !op || !algo || !ranks || !nodes || !lat || !bw) return;
        c.algo = collective_algorithm(*algo);
        if (!algo_allowed(*op, c.algo, static_cast<int>(*nodes))) {
          r.error(e["algorithm"], join_path(ep, "algorithm"),
                  fmt::format("the model never runs {} as {} on {} node(s) (ring: allreduce, "
                              "reduce_scatter, allgather, broadcast; tree: allreduce; nvls: "
                              "allreduce on one node; nvls_tree: allreduce on several; pat: "
                              "reduce_scatter, allgather on several; direct: all_to_all, "
                              "send_recv)",
                              *op, *algo, *nodes));
          return;
        }
        if (*nodes > *ranks) {
          r.error(e["nodes"], join_path(ep, "nodes"),
                  "expected at most `ranks` nodes (a node holds at least one rank)");
          return;
        }
        if (*bw <= 0) {
          r.error(e["busbw"], join_path(ep, "busbw"), "expected a positive bandwidth");
          return;
        }
        c.op = *op;
        c.ranks = static_cast<int>(*ranks);
        c.nodes = static_cast<int>(*nodes);
        c.min_bytes = min_b.value_or(0.0);
        c.max_bytes = max_b.value_or(kInf);
        if (c.min_bytes > c.max_bytes) {
          r.error(e["max_size"], join_path(ep, "max_size"), "expected max_size >= min_size");
          return;
        }
        c.latency_s = *lat;
        c.busbw_bytes_per_s = *bw;
        c.source = src.value_or("");
        out.push_back(c);
      });
}

void parse_communicator_memory(YamlReader& r, const YAML::Node& list, const std::string& path,
                               std::vector<CommunicatorMemory>& out) {
  parse_entries(
      r, list, path, "{ranks, nodes, memory} entries", {"ranks", "nodes", "memory", "source"}, out,
      [&](const YAML::Node& e, const std::string& ep) {
        bool ok = true;
        for (const char* key : {"ranks", "nodes", "memory"}) ok = r.require(e, ep, key) && ok;
        auto ranks = r.get_int(e, ep, "ranks", 2, 1 << 24);
        auto nodes = r.get_int(e, ep, "nodes", 1, 1 << 24);
        auto bytes = r.get_quantity(e, ep, "memory", Dimension::kBytes);
        auto src = r.get_string(e, ep, "source");
        if (!ok || !ranks || !nodes || !bytes) return;
        if (*nodes > *ranks) {
          r.error(e["nodes"], join_path(ep, "nodes"),
                  "expected at most `ranks` nodes (a node holds at least one rank)");
          return;
        }
        for (const CommunicatorMemory& prev : out)
          if (prev.ranks == *ranks && prev.nodes == *nodes) {
            r.error(e, ep,
                    fmt::format("a second entry for {} ranks on {} node(s)", *ranks, *nodes));
            ok = false;
          }
        if (ok)
          out.push_back(
              {static_cast<int>(*ranks), static_cast<int>(*nodes), *bytes, src.value_or("")});
      });
}

}  // namespace

void parse_compute_params(YamlReader& r, const YAML::Node& node, const std::string& path,
                          ComputeParams& out) {
  if (!r.expect_map(node, path,
                    {"gemm", "attention", "memory_bound_efficiency", "launch_overhead", "comm_sms",
                     "gemm_table", "sustained_clock", "source"}))
    return;
  if (const YAML::Node g = node["gemm"]) {
    const std::string gp = join_path(path, "gemm");
    if (r.expect_map(g, gp,
                     {"max_efficiency", "half_m", "half_n", "half_k", "fp8_max_efficiency",
                      "fp8_half_m", "fp8_half_n", "fp8_half_k", "fixed_time",
                      "unaligned_efficiency", "grouped_efficiency"})) {
      set_if(get_fraction(r, g, gp, "max_efficiency"), out.gemm_max_eff);
      // Half-saturation sizes: 0 means "no size penalty" on that dimension.
      set_if(r.get_double(g, gp, "half_m", 0.0, 1e9), out.gemm_half_m);
      set_if(r.get_double(g, gp, "half_n", 0.0, 1e9), out.gemm_half_n);
      set_if(r.get_double(g, gp, "half_k", 0.0, 1e9), out.gemm_half_k);
      set_if(get_fraction(r, g, gp, "fp8_max_efficiency"), out.fp8_max_eff);
      set_if(r.get_double(g, gp, "fp8_half_m", 0.0, 1e9), out.fp8_half_m);
      set_if(r.get_double(g, gp, "fp8_half_n", 0.0, 1e9), out.fp8_half_n);
      set_if(r.get_double(g, gp, "fp8_half_k", 0.0, 1e9), out.fp8_half_k);
      set_if(r.get_quantity(g, gp, "fixed_time", Dimension::kTime), out.gemm_fixed_time_s);
      set_if(r.get_double(g, gp, "unaligned_efficiency", 0.01, 1.0), out.gemm_unaligned_eff);
      set_if(get_grouped_efficiency(r, g, gp), out.gemm_grouped_eff);
    }
  }
  if (const YAML::Node a = node["attention"]) {
    const std::string ap = join_path(path, "attention");
    if (r.expect_map(a, ap,
                     {"fwd_efficiency", "bwd_efficiency", "half_seq", "half_head_dim", "kernel"})) {
      if (auto k = r.get_enum(a, ap, "kernel", {"flash", "unfused"}))
        out.attn_flash = *k == "flash";
      set_if(get_fraction(r, a, ap, "fwd_efficiency"), out.attn_fwd_eff);
      set_if(get_fraction(r, a, ap, "bwd_efficiency"), out.attn_bwd_eff);
      set_if(r.get_double(a, ap, "half_seq", 0.0, 1e9), out.attn_half_seq);
      set_if(r.get_double(a, ap, "half_head_dim", 0.0, 1e6), out.attn_half_head_dim);
    }
  }
  set_if(get_fraction(r, node, path, "memory_bound_efficiency"), out.membound_eff);
  set_if(r.get_quantity(node, path, "launch_overhead", Dimension::kTime), out.launch_overhead_s);
  set_if(r.get_double(node, path, "sustained_clock", 0.05, 1.0), out.sustained_clock);
  set_if(r.get_int(node, path, "comm_sms", 0, 1024), out.comm_sms);
  if (const YAML::Node t = node["gemm_table"])
    parse_gemm_table(r, t, join_path(path, "gemm_table"), out.gemm_table);
  set_if(r.get_string(node, path, "source"), out.source);
}

double communicator_memory_bytes(const CollectiveParams& c, int ranks, int nodes) {
  double same_span = -1, any = 0;
  for (const CommunicatorMemory& m : c.communicator_memory) {
    if (m.ranks == ranks && m.nodes == nodes) return m.bytes;
    if ((m.nodes > 1) == (nodes > 1)) same_span = std::max(same_span, m.bytes);
    any = std::max(any, m.bytes);
  }
  return same_span >= 0 ? same_span : any;
}

void parse_collective_params(YamlReader& r, const YAML::Node& node, const std::string& path,
                             CollectiveParams& out) {
  if (!r.expect_map(node, path,
                    {"nccl_version", "intra_ring_busbw", "nvls_busbw", "nic_busbw", "p2p_intra_bw",
                     "launch_overhead", "calibrated", "communicator_memory"}))
    return;
  set_if(r.get_string(node, path, "nccl_version"), out.nccl_version);
  // Effective bandwidths must be positive; nvls_busbw may be 0 (no NVLS).
  for (auto [key, dst] :
       {std::pair<const char*, double*>{"intra_ring_busbw", &out.intra_ring_busbw},
        {"nic_busbw", &out.nic_busbw},
        {"p2p_intra_bw", &out.p2p_intra_bw}}) {
    auto v = r.get_quantity(node, path, key, Dimension::kBandwidth);
    if (v && *v <= 0) {
      r.error(node[key], join_path(path, key), "expected a positive bandwidth");
      continue;
    }
    set_if(v, *dst);
  }
  set_if(r.get_quantity(node, path, "nvls_busbw", Dimension::kBandwidth), out.nvls_busbw);
  set_if(r.get_quantity(node, path, "launch_overhead", Dimension::kTime), out.launch_overhead_s);
  if (const YAML::Node c = node["calibrated"])
    parse_calibrated(r, c, join_path(path, "calibrated"), out.calibrated);
  if (const YAML::Node c = node["communicator_memory"])
    parse_communicator_memory(r, c, join_path(path, "communicator_memory"),
                              out.communicator_memory);
}

}  // namespace stepcast
