// Hardware profiles: every shipped profile loads with its datasheet numbers; profiles and
// overrides are validated strictly (message, key and line asserted).
#include "sim/cluster/profile.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "sim/io/yaml_util.h"

namespace stepcast {
namespace {

const std::string kData = std::string(STEPCAST_SOURCE_DIR) + "/tests/data/";
const std::string kProfiles = std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles";

std::vector<InputIssue> issues_of(const std::string& name, const std::string& overrides_yaml = "") {
  try {
    YAML::Node ov = overrides_yaml.empty() ? YAML::Node() : YAML::Load(overrides_yaml);
    load_profile(name, kProfiles, ov, "s.yaml");
  } catch (const InputError& e) {
    return e.issues();
  }
  return {};
}

const InputIssue* find(const std::vector<InputIssue>& v, const std::string& key) {
  for (const auto& i : v)
    if (i.key == key) return &i;
  return nullptr;
}

TEST(Profiles, EveryShippedProfileLoads) {
  auto names = builtin_profile_names(kProfiles);
  ASSERT_GE(names.size(), 3u);
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    try {
      HwProfile p = load_profile(n, kProfiles);
      EXPECT_EQ(p.name, n);  // the name inside matches the file name
      EXPECT_GT(p.gpu.memory_bytes, 0);
      EXPECT_GT(p.gpu.peak_flop_per_s.at(DType::kBf16), 0);
      EXPECT_GT(p.collectives.intra_ring_busbw, 0);
      EXPECT_GT(p.collectives.nic_busbw, 0);
      EXPECT_FALSE(p.collectives.nccl_version.empty());
      // Effective bandwidths cannot exceed line rates: NIC busbw <= NIC line rate.
      EXPECT_LE(p.collectives.nic_busbw, p.node.nic_bytes_per_s);
      // NVLS only where the profile says NVLS exists.
      EXPECT_EQ(p.collectives.nvls_busbw > 0, p.node.nvls);
    } catch (const InputError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(Profiles, DatasheetNumbers) {
  HwProfile a = load_profile("a100-80g-sxm", kProfiles);
  EXPECT_DOUBLE_EQ(a.gpu.memory_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(a.gpu.hbm_bytes_per_s, 2.039e12);
  EXPECT_EQ(a.gpu.sms, 108);
  EXPECT_DOUBLE_EQ(a.gpu.peak_flop_per_s.at(DType::kBf16), 312e12);
  EXPECT_EQ(a.gpu.peak_flop_per_s.count(DType::kFp8), 0u);  // no fp8 on Ampere
  EXPECT_DOUBLE_EQ(a.node.nvlink_bytes_per_s, 300e9);       // 600 GB/s bidirectional / 2
  EXPECT_DOUBLE_EQ(a.node.nic_bytes_per_s, 25e9);           // 200 Gb/s / 8
  EXPECT_FALSE(a.node.nvls);
  EXPECT_DOUBLE_EQ(a.collectives.intra_ring_busbw, 230e9);
  EXPECT_DOUBLE_EQ(a.collectives.nic_busbw, 24e9);
  // Fitted, not datasheet (tests/sim/cost checks the fit): a physically plausible ceiling.
  EXPECT_GT(a.compute.gemm_max_eff, 0.7);
  EXPECT_LT(a.compute.gemm_max_eff, 0.95);

  HwProfile h = load_profile("h100-sxm", kProfiles);
  EXPECT_DOUBLE_EQ(h.gpu.peak_flop_per_s.at(DType::kBf16), 989.4e12);
  EXPECT_DOUBLE_EQ(h.gpu.peak_flop_per_s.at(DType::kFp8), 1978.9e12);
  EXPECT_DOUBLE_EQ(h.gpu.hbm_bytes_per_s, 3.35e12);
  EXPECT_EQ(h.gpu.sms, 132);
  EXPECT_DOUBLE_EQ(h.node.nvlink_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(h.node.nic_bytes_per_s, 50e9);  // 400 Gb/s / 8
  EXPECT_TRUE(h.node.nvls);
  EXPECT_DOUBLE_EQ(h.collectives.intra_ring_busbw, 370e9);
  EXPECT_DOUBLE_EQ(h.collectives.nvls_busbw, 480e9);
  EXPECT_DOUBLE_EQ(h.collectives.nic_busbw, 48e9);
  EXPECT_GT(h.compute.gemm_max_eff, 0.7);
  EXPECT_LT(h.compute.gemm_max_eff, 0.95);
  // `stepcast fit` entries for one node of 8 (3 allreduce, 3 allgather, 2 reduce_scatter
  // ranges, 1 all_to_all; tests/sim/cost checks them against the sweeps they came from).
  ASSERT_EQ(h.collectives.calibrated.size(), 9u);
  EXPECT_EQ(h.collectives.calibrated.back().op, "all_to_all");
  EXPECT_EQ(h.collectives.calibrated[0].op, "allreduce");
  EXPECT_DOUBLE_EQ(h.collectives.calibrated[0].latency_s, 36.67e-6);

  HwProfile g = load_profile("h200-sxm", kProfiles);
  EXPECT_DOUBLE_EQ(g.gpu.memory_bytes, 140 * kGiB);  // 143771 MiB reported, see the file
  EXPECT_DOUBLE_EQ(g.gpu.hbm_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(g.gpu.peak_flop_per_s.at(DType::kBf16), h.gpu.peak_flop_per_s.at(DType::kBf16));
}

TEST(Profiles, ByPathAndDefaultDir) {
  HwProfile p = load_profile(kProfiles + "/h100-sxm.yaml", "/nonexistent");
  EXPECT_EQ(p.name, "h100-sxm");
  EXPECT_EQ(p.file, kProfiles + "/h100-sxm.yaml");
  EXPECT_EQ(resolve_profile_path("nope", kProfiles), "");
  const char* old = std::getenv("STEPCAST_PROFILES");
  std::string saved = old ? old : "";
  setenv("STEPCAST_PROFILES", "/tmp/somewhere", 1);
  EXPECT_EQ(default_profiles_dir(), "/tmp/somewhere");
  if (old)
    setenv("STEPCAST_PROFILES", saved.c_str(), 1);
  else
    unsetenv("STEPCAST_PROFILES");
}

TEST(Profiles, UnknownProfileListsKnownOnes) {
  auto issues = issues_of("h100-sxn");
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_NE(issues[0].message.find("unknown profile \"h100-sxn\""), std::string::npos);
  EXPECT_NE(issues[0].message.find(
                "a100-80g-sxm, b200-sxm, b300-sxm, gb200-nvl72, gb300-nvl72, h100-sxm, h200-sxm"),
            std::string::npos);
  EXPECT_NE(issues[0].message.find("did you mean 'h100-sxm'?"), std::string::npos);
}

TEST(Profiles, BadProfileReportsEveryProblem) {
  try {
    load_profile(kData + "bad/profile_bad.yaml", kProfiles);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const auto& v = e.issues();
    ASSERT_EQ(v.size(), 3u) << e.what();
    const InputIssue* mem = find(v, "gpu.memory");
    ASSERT_NE(mem, nullptr);
    EXPECT_EQ(mem->line, 5);
    EXPECT_NE(mem->message.find("got the bare number \"80\""), std::string::npos) << mem->message;
    // Only parsed keys would be silent what-ifs: GPUs without an NVSwitch are refused.
    const InputIssue* nvsw = find(v, "node.nvswitch");
    ASSERT_NE(nvsw, nullptr);
    EXPECT_EQ(nvsw->line, 12);
    EXPECT_NE(nvsw->message.find("nvswitch: false is not modelled"), std::string::npos)
        << nvsw->message;
    const InputIssue* topo = find(v, "fabric.topolgy");
    ASSERT_NE(topo, nullptr);
    EXPECT_EQ(topo->line, 17);
    EXPECT_NE(topo->message.find("did you mean 'topology'?"), std::string::npos);
  }
}

// Loaded profiles are kept by path and text (sim/cluster/profile.cc, ParsedProfiles: a search
// loads the profile once per plan): a second load gives the same profile, an edited file is
// read afresh, a file with problems reports them on every load, and overrides still apply.
TEST(Profiles, ReloadsGiveTheFileAsItIsNow) {
  const std::string path = testing::TempDir() + "stepcast_profile_reload.yaml";
  const std::string text = read_text_file(kProfiles + "/h100-sxm.yaml");
  auto write = [&](const std::string& t) { std::ofstream(path, std::ios::trunc) << t; };
  write(text);
  const HwProfile a = load_profile(path, kProfiles);
  const HwProfile b = load_profile(path, kProfiles);
  EXPECT_EQ(a.gpu.hbm_bytes_per_s, b.gpu.hbm_bytes_per_s);
  EXPECT_EQ(a.compute.sustained_clock, b.compute.sustained_clock);
  EXPECT_EQ(a.collectives.calibrated.size(), b.collectives.calibrated.size());
  // Edited: 3.35 TB/s -> 1.5 TB/s.
  std::string edited = text;
  const size_t at = edited.find("hbm_bandwidth: 3.35 TB/s");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 24, "hbm_bandwidth: 1.5 TB/s");
  write(edited);
  EXPECT_DOUBLE_EQ(load_profile(path, kProfiles).gpu.hbm_bytes_per_s, 1.5e12);
  // Broken (a bare number where a unit is needed): refused on every load, not kept.
  std::string broken = text;
  broken.replace(at, 24, "hbm_bandwidth: 3");
  write(broken);
  for (int i = 0; i < 2; ++i) EXPECT_THROW(load_profile(path, kProfiles), InputError);
  // Back to the original, with an override on top of the kept parse.
  write(text);
  EXPECT_EQ(load_profile(path, kProfiles).gpu.hbm_bytes_per_s, a.gpu.hbm_bytes_per_s);
  const HwProfile o =
      load_profile(path, kProfiles, YAML::Load("{gpu.hbm_bandwidth: 2 TB/s}"), "s.yaml");
  EXPECT_DOUBLE_EQ(o.gpu.hbm_bytes_per_s, 2e12);
  EXPECT_EQ(load_profile(path, kProfiles).gpu.hbm_bytes_per_s, a.gpu.hbm_bytes_per_s);
  std::remove(path.c_str());
}

TEST(ProfileOverrides, ChangeValues) {
  HwProfile p =
      load_profile("h100-sxm", kProfiles,
                   YAML::Load("{node.nics: 4, node.nic: 200 Gb/s, fabric.pod_gpus: 64, "
                              "compute.gemm.max_efficiency: 0.7, gpu.peak.fp8: 1 PFLOP/s}"),
                   "s.yaml");
  EXPECT_EQ(p.node.nics, 4);
  EXPECT_DOUBLE_EQ(p.node.nic_bytes_per_s, 25e9);  // 200 Gb/s / 8
  EXPECT_EQ(p.fabric.pod_gpus, 64);
  EXPECT_DOUBLE_EQ(p.compute.gemm_max_eff, 0.7);
  EXPECT_DOUBLE_EQ(p.gpu.peak_flop_per_s.at(DType::kFp8), 1e15);
  EXPECT_DOUBLE_EQ(p.gpu.peak_flop_per_s.at(DType::kBf16), 989.4e12);  // sibling kept
  // A key absent from the file but in the schema can be set (fabric.latency).
  HwProfile q = load_profile("h100-sxm", kProfiles, YAML::Load("{fabric.latency: 2 us}"), "s.yaml");
  EXPECT_DOUBLE_EQ(q.fabric.latency_s, 2e-6);
}

// A mapping merges into the section it names, key by key: `compute: {comm_sms: 20}` used to
// replace the whole compute section, so sustained_clock fell back to 1.0 and the GEMM curve to
// the built-in one, and the Megatron-Core 1.7B case went 373.96 -> 329.83 ms with an override
// that repeated the file's own comm_sms (16). Sequences and scalars still replace.
TEST(ProfileOverrides, AMappingMergesIntoItsSection) {
  const HwProfile file = load_profile("h100-sxm", kProfiles, YAML::Node(), "s.yaml");
  // h100-sxm.yaml: compute.sustained_clock 0.73, gemm {max_efficiency 0.880, half_m 107}.
  ASSERT_DOUBLE_EQ(file.compute.sustained_clock, 0.73);
  ASSERT_DOUBLE_EQ(file.compute.gemm_half_m, 107);
  HwProfile p =
      load_profile("h100-sxm", kProfiles,
                   YAML::Load("{compute: {comm_sms: 20, gemm: {max_efficiency: 0.7}}}"), "s.yaml");
  EXPECT_EQ(p.compute.comm_sms, 20);
  EXPECT_DOUBLE_EQ(p.compute.gemm_max_eff, 0.7);
  EXPECT_DOUBLE_EQ(p.compute.sustained_clock, 0.73);  // kept from the file
  EXPECT_DOUBLE_EQ(p.compute.gemm_half_m, 107);       // kept from the file's gemm section
  EXPECT_DOUBLE_EQ(p.compute.gemm_fixed_time_s, file.compute.gemm_fixed_time_s);
  // Repeating the file's own value changes nothing.
  HwProfile same =
      load_profile("h100-sxm", kProfiles, YAML::Load("{compute: {comm_sms: 16}}"), "s.yaml");
  EXPECT_DOUBLE_EQ(same.compute.sustained_clock, file.compute.sustained_clock);
  EXPECT_DOUBLE_EQ(same.compute.gemm_max_eff, file.compute.gemm_max_eff);
  EXPECT_DOUBLE_EQ(same.compute.attn_fwd_eff, file.compute.attn_fwd_eff);
  EXPECT_DOUBLE_EQ(same.compute.membound_eff, file.compute.membound_eff);
  // The dotted and the nested spelling agree.
  HwProfile dotted =
      load_profile("h100-sxm", kProfiles, YAML::Load("{compute.comm_sms: 20}"), "s.yaml");
  EXPECT_EQ(dotted.compute.comm_sms, p.compute.comm_sms);
  EXPECT_DOUBLE_EQ(dotted.compute.sustained_clock, p.compute.sustained_clock);
  // A key the file does not have (fabric.latency) is added inside the section.
  EXPECT_DOUBLE_EQ(
      load_profile("h100-sxm", kProfiles, YAML::Load("{fabric: {latency: 2 us}}"), "s.yaml")
          .fabric.latency_s,
      2e-6);
  // A sequence replaces: no calibrated collective entries left.
  ASSERT_FALSE(file.collectives.calibrated.empty());
  HwProfile none =
      load_profile("h100-sxm", kProfiles, YAML::Load("{collectives: {calibrated: []}}"), "s.yaml");
  EXPECT_TRUE(none.collectives.calibrated.empty());
  EXPECT_DOUBLE_EQ(none.collectives.nic_busbw, file.collectives.nic_busbw);
  // An unknown key inside the mapping is reported in the scenario, with its full path.
  auto v = issues_of("h100-sxm", "compute:\n  comm_smz: 1\n");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].file, "s.yaml");
  EXPECT_EQ(v[0].line, 2);
  EXPECT_EQ(v[0].column, 3);
  EXPECT_EQ(v[0].key, "cluster.overrides.compute.comm_smz");
  EXPECT_NE(v[0].message.find("did you mean 'comm_sms'?"), std::string::npos) << v[0].message;
}

// Property over every key of every shipped profile: an override that repeats the value the
// file already has changes nothing, dotted (`compute.gemm.half_m: 107`) or nested
// (`compute: {gemm: {half_m: 107}}`), for scalars and whole sequences alike. Before mappings
// merged, every nested spelling of a key below a section reset that section's other keys.
TEST(ProfileOverrides, RepeatingTheFilesOwnValueChangesNothing) {
  int checked = 0;
  for (const std::string& name : builtin_profile_names(kProfiles)) {
    const HwProfile file = load_profile(name, kProfiles, YAML::Node(), "s.yaml");
    const YAML::Node doc = YAML::LoadFile(kProfiles + "/" + name + ".yaml");
    // (segments, value) of every scalar and every sequence under a mapping.
    std::vector<std::pair<std::vector<std::string>, YAML::Node>> leaves;
    std::function<void(const YAML::Node&, std::vector<std::string>&)> walk =
        [&](const YAML::Node& n, std::vector<std::string>& segs) {
          for (const auto& kv : n) {
            segs.push_back(kv.first.Scalar());
            if (kv.second.IsMap())
              walk(kv.second, segs);
            else
              leaves.emplace_back(segs, kv.second);
            segs.pop_back();
          }
        };
    std::vector<std::string> segs;
    walk(doc, segs);
    ASSERT_GT(leaves.size(), 30u) << name;
    for (const auto& [path, value] : leaves) {
      std::string dotted;
      for (const auto& s : path) dotted += (dotted.empty() ? "" : ".") + s;
      SCOPED_TRACE(name + ": " + dotted);
      YAML::Node flat;
      flat[dotted] = YAML::Clone(value);
      EXPECT_TRUE(load_profile(name, kProfiles, flat, "s.yaml") == file);
      YAML::Node nested = YAML::Clone(value);
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        YAML::Node up;
        up[*it] = nested;
        nested = up;
      }
      EXPECT_TRUE(load_profile(name, kProfiles, nested, "s.yaml") == file);
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

// Quantities outside any plausible range are rejected where they are written: 1e-300 GB/s or a
// 1e300 us overhead used to overflow simulated time (exit 1, "negative duration"), 1e300
// TB/s became an infinite bandwidth and 1e300 GiB an "inf GiB" capacity that fit anything.
TEST(ProfileOverrides, QuantitiesOutsideTheirRangeAreRejected) {
  for (const char* ov : {"{node.nvlink: 1e-300 GB/s}", "{gpu.hbm_bandwidth: 1e300 TB/s}",
                         "{collectives.intra_ring_busbw: 1e-300 GB/s}", "{gpu.memory: 1e300 GiB}",
                         "{gpu.peak.bf16: 1e-300 TFLOP/s}", "{gpu.peak.bf16: 1e300 TFLOP/s}",
                         "{collectives.launch_overhead: 1e300 us}", "{fabric.latency: 2 s}",
                         "{compute.gemm.fixed_time: 1e300 us}"}) {
    SCOPED_TRACE(ov);
    auto v = issues_of("h100-sxm", ov);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].file, "s.yaml");
    EXPECT_EQ(v[0].line, 1);
    EXPECT_EQ(v[0].key.rfind("cluster.overrides.", 0), 0u) << v[0].key;
    EXPECT_NE(v[0].message.find("expected 0 or a value between"), std::string::npos)
        << v[0].message;
  }
  // The ends of each range are accepted.
  for (const char* ov : {"{node.nvlink: 1 MB/s}", "{gpu.hbm_bandwidth: 1000000 TB/s}",
                         "{gpu.memory: 1024 TiB}", "{gpu.peak.bf16: 1000 PFLOP/s}",
                         "{gpu.peak.bf16: 1 GFLOP/s}", "{collectives.launch_overhead: 1 s}"}) {
    SCOPED_TRACE(ov);
    EXPECT_TRUE(issues_of("h100-sxm", ov).empty());
  }
}

// gpu.memory_reserved (the CUDA context, NCCL buffers, fragmentation) is 0 unless set; set,
// it must leave some memory: 0 <= reserved < gpu.memory (the H100's 81559 MiB).
TEST(ProfileOverrides, MemoryReserved) {
  const HwProfile file = load_profile("h100-sxm", kProfiles, YAML::Node(), "s.yaml");
  EXPECT_EQ(file.gpu.memory_reserved_bytes, 0);
  EXPECT_EQ(file.gpu.usable_memory_bytes(), file.gpu.memory_bytes);
  const HwProfile p =
      load_profile("h100-sxm", kProfiles, YAML::Load("{gpu.memory_reserved: 4 GiB}"), "s.yaml");
  EXPECT_DOUBLE_EQ(p.gpu.memory_reserved_bytes, 4.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(p.gpu.usable_memory_bytes(), (81559.0 - 4096.0) * (1 << 20));
  EXPECT_TRUE(issues_of("h100-sxm", "{gpu.memory_reserved: 0 GiB}").empty());
  EXPECT_TRUE(issues_of("h100-sxm", "{gpu.memory_reserved: 81558 MiB}").empty());
  for (const char* ov : {"{gpu.memory_reserved: 81559 MiB}", "{gpu.memory_reserved: 100 GiB}",
                         "{gpu.memory_reserved: -1 GiB}", "{gpu.memory_reserved: 4}"}) {
    SCOPED_TRACE(ov);
    auto v = issues_of("h100-sxm", ov);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].line, 1);
    EXPECT_EQ(v[0].key, "cluster.overrides.gpu.memory_reserved");
  }
  EXPECT_NE(issues_of("h100-sxm", "{gpu.memory_reserved: 100 GiB}")[0].message.find(
                "less than gpu.memory"),
            std::string::npos);
}

// collectives.communicator_memory (NCCL's buffers per communicator, measured by
// stepcast-bench): empty by default; entries {ranks, nodes, memory}; a shape not listed takes
// the largest entry of the same span (one node or several), else the largest of all.
TEST(ProfileOverrides, CommunicatorMemory) {
  const HwProfile file = load_profile("h100-sxm", kProfiles, YAML::Node(), "s.yaml");
  EXPECT_TRUE(file.collectives.communicator_memory.empty());
  EXPECT_EQ(communicator_memory_bytes(file.collectives, 8, 1), 0);
  const HwProfile p = load_profile(
      "h100-sxm", kProfiles,
      YAML::Load("{collectives.communicator_memory: [{ranks: 2, nodes: 1, memory: 100 MiB}, "
                 "{ranks: 8, nodes: 1, memory: 300 MiB, source: bench}, "
                 "{ranks: 16, nodes: 2, memory: 50 MiB}]}"),
      "s.yaml");
  ASSERT_EQ(p.collectives.communicator_memory.size(), 3u);
  EXPECT_EQ(p.collectives.communicator_memory[1].source, "bench");
  const double mib = 1 << 20;
  EXPECT_EQ(communicator_memory_bytes(p.collectives, 2, 1), 100 * mib);  // listed
  EXPECT_EQ(communicator_memory_bytes(p.collectives, 8, 1), 300 * mib);  // listed
  EXPECT_EQ(communicator_memory_bytes(p.collectives, 4, 1), 300 * mib);  // largest on 1 node
  EXPECT_EQ(communicator_memory_bytes(p.collectives, 48, 6), 50 * mib);  // largest on several
  CollectiveParams one_node = p.collectives;
  one_node.communicator_memory.pop_back();
  EXPECT_EQ(communicator_memory_bytes(one_node, 48, 6), 300 * mib);  // largest of all
  struct Bad {
    const char* yaml;
    const char* key;
    const char* says;
  };
  for (const Bad& b :
       {Bad{"{collectives.communicator_memory: 1 GiB}",
            "cluster.overrides.collectives.communicator_memory", "expected a list"},
        Bad{"{collectives.communicator_memory: [{ranks: 2, nodes: 3, memory: 1 MiB}]}",
            "cluster.overrides.collectives.communicator_memory[0].nodes", "at most `ranks`"},
        Bad{"{collectives.communicator_memory: [{ranks: 2, nodes: 1, memory: -1 MiB}]}",
            "cluster.overrides.collectives.communicator_memory[0].memory", "non-negative"},
        Bad{"{collectives.communicator_memory: [{ranks: 2, nodes: 1}]}",
            "cluster.overrides.collectives.communicator_memory[0].memory", "missing"},
        Bad{"{collectives.communicator_memory: [{ranks: 2, nodes: 1, memory: 1 MiB}, "
            "{ranks: 2, nodes: 1, memory: 2 MiB}]}",
            "cluster.overrides.collectives.communicator_memory[1]", "a second entry"},
        Bad{"{collectives.communicator_memory: [{ranks: 2, nodes: 1, memry: 1 MiB}]}",
            "cluster.overrides.collectives.communicator_memory[0].memry", "memory"}}) {
    SCOPED_TRACE(b.yaml);
    const auto v = issues_of("h100-sxm", b.yaml);
    ASSERT_FALSE(v.empty());
    const InputIssue* i = find(v, b.key);
    ASSERT_NE(i, nullptr) << v[0].key << ": " << v[0].message;
    EXPECT_NE(i->message.find(b.says), std::string::npos) << i->message;
    EXPECT_EQ(i->line, 1);
  }
}

TEST(ProfileOverrides, PodsHoldWholeNodes) {
  // 64 GPUs = 8 nodes of 8: fine; 12 is not a multiple of 8.
  EXPECT_EQ(load_profile("h100-sxm", kProfiles, YAML::Load("{fabric.pod_gpus: 64}"), "s.yaml")
                .fabric.pod_gpus,
            64);
  auto v = issues_of("h100-sxm", "{fabric.pod_gpus: 12}");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].key, "cluster.overrides.fabric.pod_gpus");
  EXPECT_EQ(v[0].line, 1);
  EXPECT_NE(v[0].message.find("expected a multiple of node.gpus (8)"), std::string::npos);
  v = issues_of("h100-sxm", "{fabric.topology: torus}");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].message.find("unknown value \"torus\" (known: rail-optimized)"), std::string::npos)
      << v[0].message;
}

TEST(Profiles, IssuesWithoutAPositionGetTheNearestOne) {
  // A key missing from a mapping that has no position of its own (one an override created,
  // or a section that is absent) is placed at the nearest node above it on its key path,
  // at worst the document's first key: every issue has a line.
  IssueList list;
  YamlReader r("p.yaml", list);
  r.set_root(load_yaml_text("# comment\nname: x\nnode:\n  gpus: 8\n", "p.yaml"));
  r.require(YAML::Node(), "fabric", "topology");  // no fabric at all: the first key
  r.require(YAML::Node(), "node.extra", "x");     // under node: node's value (line 4)
  ASSERT_EQ(list.issues().size(), 2u);
  EXPECT_EQ(list.issues()[0].line, 2);
  EXPECT_EQ(list.issues()[0].key, "fabric.topology");
  EXPECT_EQ(list.issues()[1].line, 4);
}

TEST(ProfileOverrides, BadOverridesPointAtTheScenario) {
  auto v = issues_of("h100-sxm", "{node.nicz: 4}");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].file, "s.yaml");
  EXPECT_EQ(v[0].key, "cluster.overrides.node.nicz");
  EXPECT_EQ(v[0].line, 1);
  EXPECT_NE(v[0].message.find("unknown key (did you mean 'nics'?)"), std::string::npos);

  v = issues_of("h100-sxm", "{fabric.nic_gbps: 200}");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].key, "cluster.overrides.fabric.nic_gbps");
  EXPECT_NE(v[0].message.find("unknown key"), std::string::npos);

  v = issues_of("h100-sxm", "\n\n{node.nic: 100}");  // value on line 3
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].file, "s.yaml");
  EXPECT_EQ(v[0].line, 3);
  EXPECT_NE(v[0].message.find("got the bare number \"100\""), std::string::npos);

  v = issues_of("h100-sxm", "{node.nvswitch: false}");  // GPUs without NVSwitch: not modelled
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].file, "s.yaml");
  EXPECT_EQ(v[0].key, "cluster.overrides.node.nvswitch");
  EXPECT_NE(v[0].message.find("nvswitch: false is not modelled"), std::string::npos);

  v = issues_of("h100-sxm", "{node..nics: 4}");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].message.find("expected a dotted profile key"), std::string::npos);

  v = issues_of("h100-sxm", "[1, 2]");
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].key, "cluster.overrides");
}

}  // namespace
}  // namespace stepcast

// A what-if override of a line rate moves the measured bandwidths taken at the file's rate:
// h100-sxm has nic 400 Gb/s and nic_busbw 48 GB/s; at 200 Gb/s the NIC busbw is 24 GB/s.
TEST(ProfileOverrides, LineRateOverrideScalesMeasuredBandwidths) {
  const std::string dir = stepcast::default_profiles_dir();
  const stepcast::HwProfile base = stepcast::load_profile("h100-sxm", dir);
  YAML::Node ov = YAML::Load("{node.nic: 200 Gb/s, node.nvlink: 225 GB/s}");
  const stepcast::HwProfile half = stepcast::load_profile("h100-sxm", dir, ov, "s.yaml");
  EXPECT_DOUBLE_EQ(half.collectives.nic_busbw, base.collectives.nic_busbw / 2);
  EXPECT_DOUBLE_EQ(half.collectives.intra_ring_busbw, base.collectives.intra_ring_busbw / 2);
  EXPECT_DOUBLE_EQ(half.collectives.nvls_busbw, base.collectives.nvls_busbw / 2);
  // An explicit override of the measured figure wins over the scaling.
  YAML::Node both = YAML::Load("{node.nic: 200 Gb/s, collectives.nic_busbw: 20 GB/s}");
  EXPECT_DOUBLE_EQ(stepcast::load_profile("h100-sxm", dir, both, "s.yaml").collectives.nic_busbw,
                   20e9);
}

// A bus bandwidth above the line rate it runs over is refused (check_line_rates): a copy of
// h100-sxm with node.nic 100 Gb/s (12.5 GB/s a NIC) and its measured 48 GB/s nic_busbw ran
// as if nothing changed, while the same change as an override rescales it to 12 GB/s; an
// override setting the figure itself above the line rate is refused at its own key.
TEST(ProfileOverrides, BusBandwidthAboveTheLineRateIsRefused) {
  const std::string dir = stepcast::default_profiles_dir();
  std::string text = stepcast::read_text_file(dir + "/h100-sxm.yaml");
  const size_t at = text.find("nic: 400 Gb/s");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 13, "nic: 100 Gb/s");
  const std::string path = testing::TempDir() + "stepcast_slow_nic.yaml";
  std::ofstream(path, std::ios::trunc) << text;
  try {
    stepcast::load_profile(path, dir);
    ADD_FAILURE() << "no InputError";
  } catch (const stepcast::InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].key, "collectives.nic_busbw");
    EXPECT_GT(e.issues()[0].line, 0);
    EXPECT_NE(e.issues()[0].message.find("48 GB/s is above node.nic"), std::string::npos)
        << e.issues()[0].message;
  }
  std::remove(path.c_str());
  YAML::Node slow = YAML::Load("{node.nic: 100 Gb/s}");
  EXPECT_DOUBLE_EQ(stepcast::load_profile("h100-sxm", dir, slow, "s.yaml").collectives.nic_busbw,
                   12e9);
  YAML::Node fast = YAML::Load("{collectives.intra_ring_busbw: 500 GB/s}");
  EXPECT_THROW(stepcast::load_profile("h100-sxm", dir, fast, "s.yaml"), stepcast::InputError);
}

// compute.attention.kernel selects the attention implementation; anything else is an error.
TEST(ProfileOverrides, AttentionKernel) {
  const std::string dir = stepcast::default_profiles_dir();
  EXPECT_TRUE(stepcast::load_profile("a100-80g-sxm", dir).compute.attn_flash);
  YAML::Node ov = YAML::Load("{compute.attention.kernel: unfused}");
  EXPECT_FALSE(stepcast::load_profile("a100-80g-sxm", dir, ov, "s.yaml").compute.attn_flash);
  YAML::Node bad = YAML::Load("{compute.attention.kernel: fast}");
  try {
    stepcast::load_profile("a100-80g-sxm", dir, bad, "s.yaml");
    FAIL() << "expected InputError";
  } catch (const stepcast::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown value \"fast\" (known: flash, unfused)"),
              std::string::npos)
        << e.what();
  }
}
