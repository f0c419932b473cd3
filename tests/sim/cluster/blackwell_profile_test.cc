// The Blackwell profiles: each figure as the sources in the file give it (per GPU, dense),
// the NVLink domain against the host, and node.gpus_per_host validated.
#include <string>

#include <gtest/gtest.h>

#include "model/units.h"
#include "sim/cluster/profile.h"
#include "sim/io/yaml_util.h"

namespace stepcast {
namespace {

const std::string kProfiles = std::string(STEPCAST_SOURCE_DIR) + "/hw_profiles";

struct Expected {
  const char* name;
  double bf16_t, fp8_t, fp4_t;  // TFLOP/s dense
  double memory_gib, hbm_tb_s;
  int gpus, host, nics, sms;
  double nic_gbit;
};

TEST(BlackwellProfiles, FiguresTraceToTheSources) {
  // B200 HGX (1000 W) / GB200 (1200 W) / B300 HGX / GB300 (1400 W) columns; NVL72 rack
  // figures / 72: 576 TB/s -> 8 TB/s, 1,080 PFLOPS FP4 -> 15,000, 360 PFLOPS FP8 -> 5,000.
  const Expected rows[] = {
      {"b200-sxm", 2250, 4500, 9000, 179, 8.0, 8, 8, 8, 148, 400},
      {"b300-sxm", 2250, 4500, 13000, 269, 7.7, 8, 8, 8, 160, 800},
      {"gb200-nvl72", 2500, 5000, 10000, 185, 8.0, 72, 4, 72, 148, 400},
      {"gb300-nvl72", 2500, 5000, 15000, 278, 8.0, 72, 4, 72, 160, 800},
  };
  for (const Expected& e : rows) {
    SCOPED_TRACE(e.name);
    const HwProfile p = load_profile(e.name, kProfiles);
    EXPECT_DOUBLE_EQ(p.gpu.peak_flop_per_s.at(DType::kBf16), e.bf16_t * 1e12);
    EXPECT_DOUBLE_EQ(p.gpu.peak_flop_per_s.at(DType::kFp8), e.fp8_t * 1e12);
    EXPECT_DOUBLE_EQ(p.gpu.peak_flop_per_s.at(DType::kMxfp8), e.fp8_t * 1e12);  // FP8 rate
    EXPECT_DOUBLE_EQ(p.gpu.peak_flop_per_s.at(DType::kNvfp4), e.fp4_t * 1e12);
    EXPECT_DOUBLE_EQ(p.gpu.memory_bytes, e.memory_gib * kGiB);
    EXPECT_DOUBLE_EQ(p.gpu.hbm_bytes_per_s, e.hbm_tb_s * 1e12);
    EXPECT_EQ(p.gpu.sms, e.sms);
    EXPECT_EQ(p.node.gpus, e.gpus);
    EXPECT_EQ(p.node.host_gpus(), e.host);
    EXPECT_EQ(p.node.nics, e.nics);  // one NIC per GPU
    EXPECT_DOUBLE_EQ(p.node.nic_bytes_per_s, e.nic_gbit * 1e9 / 8);
    // NVLink 5: 1.8 TB/s bidirectional per GPU = 900 GB/s per direction; NVLS on.
    EXPECT_DOUBLE_EQ(p.node.nvlink_bytes_per_s, 900e9);
    EXPECT_TRUE(p.node.nvls);
    // H100's measured busbw scaled by the NVLink line rate (x2) and the NIC rate.
    EXPECT_DOUBLE_EQ(p.collectives.intra_ring_busbw, 740e9);
    EXPECT_DOUBLE_EQ(p.collectives.nvls_busbw, 960e9);
    EXPECT_DOUBLE_EQ(p.collectives.nic_busbw, 48e9 * e.nic_gbit / 400);
    EXPECT_TRUE(p.collectives.calibrated.empty());
  }
}

TEST(BlackwellProfiles, OlderGpusHaveNoBlockScaledPeak) {
  for (const char* n : {"a100-80g-sxm", "h100-sxm", "h200-sxm"}) {
    const HwProfile p = load_profile(n, kProfiles);
    EXPECT_EQ(p.gpu.peak_flop_per_s.count(DType::kMxfp8), 0u) << n;
    EXPECT_EQ(p.gpu.peak_flop_per_s.count(DType::kNvfp4), 0u) << n;
    EXPECT_EQ(p.node.host_gpus(), p.node.gpus) << n;  // the host is the domain
  }
}

TEST(BlackwellProfiles, GpusPerHostDividesTheDomain) {
  try {
    load_profile("gb200-nvl72", kProfiles, YAML::Load("{node.gpus_per_host: 5}"), "s.yaml");
    ADD_FAILURE() << "gpus_per_host 5 of 72 accepted";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].key, "cluster.overrides.node.gpus_per_host");
    EXPECT_NE(e.issues()[0].message.find("expected a divisor of node.gpus (72)"), std::string::npos)
        << e.issues()[0].message;
  }
  // 8 divides 72: accepted.
  EXPECT_EQ(load_profile("gb200-nvl72", kProfiles, YAML::Load("{node.gpus_per_host: 8}"), "s.yaml")
                .node.host_gpus(),
            8);
}

}  // namespace
}  // namespace stepcast
