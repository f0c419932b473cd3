// The compute: and collectives: sections of a hardware profile (sim/cluster/params.cc): each
// rule of their parsers refused with its key, line and message.
#include <string>

#include <gtest/gtest.h>

#include "sim/cluster/profile.h"
#include "sim/io/yaml_util.h"

namespace stepcast {
namespace {

TEST(Profiles, SectionsOfTheCostModelAreStrict) {
  auto text = [](const std::string& extra) {
    return "name: x\n"
           "gpu: {memory: 80 GiB, hbm_bandwidth: 3 TB/s, sms: 100, peak: {bf16: 100 TFLOP/s}}\n"
           "node: {gpus: 8, nvlink: 450 GB/s, nics: 8, nic: 400 Gb/s}\n" +
           extra;
  };
  auto issues = [&](const std::string& extra) {
    IssueList list;
    YamlReader r("p.yaml", list);
    HwProfile p = parse_profile(r, load_yaml_text(text(extra), "p.yaml"));
    return list.issues();
  };
  auto one = [&](const std::string& extra, const std::string& key, const std::string& msg) {
    auto v = issues(extra);
    ASSERT_EQ(v.size(), 1u) << extra;
    EXPECT_EQ(v[0].key, key);
    EXPECT_EQ(v[0].line, 4);
    EXPECT_NE(v[0].message.find(msg), std::string::npos) << v[0].message;
  };
  EXPECT_TRUE(
      issues("compute: {gemm: {max_efficiency: 0.8, half_m: 32}, launch_overhead: 3 us}").empty());
  one("compute: {gemm: {max_efficiency: 1.5}}", "compute.gemm.max_efficiency",
      "expected a number in [0.01, 1], got 1.5");
  // An efficiency below 1% of the peak is no kernel's (its tasks would run for years).
  one("compute: {attention: {fwd_efficiency: 1e-300}}", "compute.attention.fwd_efficiency",
      "expected a number in [0.01, 1], got 1e-300");
  one("compute: {memory_bound_efficiency: 0}", "compute.memory_bound_efficiency",
      "expected a number in [0.01, 1], got 0");
  // Communication kernels cannot hold every SM (text() has sms: 100).
  one("compute: {comm_sms: 100}", "compute.comm_sms",
      "compute.comm_sms (100) must be below gpu.sms (100)");
  one("compute: {launch_overhead: 4}", "compute.launch_overhead", "bare number");
  one("compute: {gemm: {unaligned_efficiency: 0}}", "compute.gemm.unaligned_efficiency",
      "got 0");  // 0 would make unaligned GEMMs take forever
  one("compute: {gemm: {unaligned_efficiency: 1.2}}", "compute.gemm.unaligned_efficiency",
      "got 1.2");
  // The grouped-GEMM factor: a finite number in (0, 2] (0 would make grouped GEMMs take
  // forever; above 2 no grouped GEMM runs beside its experts' dense curve). 1 and 2 load.
  EXPECT_TRUE(issues("compute: {gemm: {grouped_efficiency: 2}}").empty());
  EXPECT_TRUE(issues("compute: {gemm: {grouped_efficiency: 0.05}}").empty());
  for (const char* bad : {"0", "-0.5", "2.5"})
    one(std::string("compute: {gemm: {grouped_efficiency: ") + bad + "}}",
        "compute.gemm.grouped_efficiency",
        std::string("expected a number in (0, 2] (1: Transformer Engine's per-expert GEMMs at "
                    "the dense curve), got ") +
            bad);
  one("compute: {gemm: {grouped_efficiency: .inf}}", "compute.gemm.grouped_efficiency",
      "expected a number, got \".inf\"");
  one("compute: {gemm: {grouped_efficiency: .nan}}", "compute.gemm.grouped_efficiency",
      "expected a number, got \".nan\"");
  one("compute: {gemm: {grouped_efficiency: fast}}", "compute.gemm.grouped_efficiency",
      "expected a number, got \"fast\"");
  one("compute: {gemm: {grouped_eficiency: 0.9}}", "compute.gemm.grouped_eficiency",
      "did you mean 'grouped_efficiency'?");
  // fp8's own half sizes: non-negative like the 16-bit ones (0: no size penalty).
  one("compute: {gemm: {fp8_half_k: -3}}", "compute.gemm.fp8_half_k", "got -3");
  one("compute: {gemm: {fp8_half_m: big}}", "compute.gemm.fp8_half_m", "big");
  one("compute: {gemm: {max_efficency: 0.8}}", "compute.gemm.max_efficency",
      "did you mean 'max_efficiency'?");
  one("collectives: {nic_busbw: 48 Gb}", "collectives.nic_busbw", "unknown unit \"Gb\"");
  one("collectives: {intra_ring_busbw: 0 GB/s}", "collectives.intra_ring_busbw",
      "expected a positive bandwidth");
  one("collectives: {calibrated: [{op: allreduse, algorithm: ring, ranks: 8, nodes: 1, latency: 2 "
      "us, busbw: 1 GB/s}]}",
      "collectives.calibrated[0].op", "did you mean 'allreduce'?");
  // Calibrated entries name their algorithm, one the model runs for that op and shape.
  const std::string entry =
      "collectives: {calibrated: [{op: allreduce, ranks: 8, nodes: 1, "
      "latency: 2 us, busbw: 1 GB/s";
  EXPECT_TRUE(issues(entry + ", algorithm: nvls}]}").empty());
  one(entry + "}]}", "collectives.calibrated[0].algorithm",
      "missing key: name the algorithm the entry was measured with (ring | tree | nvls | "
      "nvls_tree | pat | direct");
  one(entry + ", algorithm: nvsl}]}", "collectives.calibrated[0].algorithm",
      "did you mean 'nvls'?");
  one(entry + ", algorithm: nvls_tree}]}", "collectives.calibrated[0].algorithm",
      "the model never runs allreduce as nvls_tree on 1 node(s)");
  one("collectives: {calibrated: [{op: allgather, algorithm: nvls, ranks: 8, nodes: 1, "
      "latency: 2 us, busbw: 1 GB/s}]}",
      "collectives.calibrated[0].algorithm", "the model never runs allgather as nvls");
  one("collectives: {calibrated: [{op: send_recv, algorithm: ring, ranks: 2, nodes: 2, "
      "latency: 2 us, busbw: 1 GB/s}]}",
      "collectives.calibrated[0].algorithm", "direct: all_to_all, send_recv");
  one("compute: {gemm_table: [{m: 8192, n: 8192, k: 8192, throughput: 780}]}",
      "compute.gemm_table[0].throughput", "bare number");
  // A valid table entry is read in SI units.
  IssueList list;
  YamlReader r("p.yaml", list);
  HwProfile p =
      parse_profile(r, load_yaml_text(text("compute: {gemm_table: [{m: 1, n: 2, k: 3, dtype: fp8, "
                                           "throughput: 780 TFLOP/s}]}"),
                                      "p.yaml"));
  ASSERT_TRUE(list.empty());
  ASSERT_EQ(p.compute.gemm_table.size(), 1u);
  EXPECT_EQ(p.compute.gemm_table[0].dtype, DType::kFp8);
  EXPECT_DOUBLE_EQ(p.compute.gemm_table[0].flop_per_s, 780e12);
}

}  // namespace
}  // namespace stepcast
