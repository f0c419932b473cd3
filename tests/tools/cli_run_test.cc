// End-to-end tests of tools/stepcast's binary: run, lower, sweep and their reports (JSON, trace,
// SVG, HTML, progress), bad input and flags, exit codes and messages.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fs = std::filesystem;
using namespace cli_test;

TEST(Cli, RunPrintsSummaryAndJsonBreakdownSumsToStepTime) {
  fs::path d = tmpdir();
  CliRun r = stepcast("run " + kDefault + " --json " + (d / "r.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Step time"), std::string::npos);
  EXPECT_EQ(r.err, "") << "no progress bar when stderr is not a terminal";
  auto j = nlohmann::json::parse(slurp(d / "r.json"));
  EXPECT_EQ(j["schema"], "stepcast.result/1");
  for (const char* k :
       {"step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "params_total", "memory_peak_gib",
        "memory_peak_gib_per_stage", "fits_memory", "breakdown_s"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  double sum = 0;
  for (const char* k : {"compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm",
                        "dp_comm", "bubble", "optimizer"}) {
    ASSERT_TRUE(j["breakdown_s"].contains(k)) << k;
    sum += j["breakdown_s"][k].get<double>();
  }
  // The breakdown partitions the step in integer ns; each term is rounded to ns once, so
  // the sum equals the step time to within 9 ns of rounding.
  EXPECT_NEAR(sum, j["step_time_s"].get<double>(), 1e-8);
  EXPECT_TRUE(j["fits_memory"].get<bool>());
  // The critical path (an added key of stepcast.result/1): its time per category sums to
  // the step time (it covers [0, step] without gaps; each term summed from integer ns).
  ASSERT_TRUE(j.contains("critical_path"));
  const auto& cp = j["critical_path"];
  double on_path = 0;
  for (const auto& [k, v] : cp["by_category_s"].items()) on_path += v.get<double>();
  EXPECT_NEAR(on_path, j["step_time_s"].get<double>(), 1e-6);
  EXPECT_NEAR(cp["total_s"].get<double>(), j["step_time_s"].get<double>(), 1e-6);
  EXPECT_EQ(cp["longest"].size(), 5u);
  EXPECT_NE(r.out.find("Critical path: "), std::string::npos);
}

TEST(Cli, SameInputGivesBitIdenticalJson) {
  fs::path d = tmpdir();
  write(d / "s.yaml", kSmall);
  ASSERT_EQ(stepcast("run " + (d / "s.yaml").string() + " --json " + (d / "a.json").string()).code,
            0);
  ASSERT_EQ(stepcast("run " + (d / "s.yaml").string() + " --json " + (d / "b.json").string()).code,
            0);
  EXPECT_EQ(slurp(d / "a.json"), slurp(d / "b.json"));
}

TEST(Cli, BadScenarioExitsTwoWithFileLineAndKey) {
  fs::path d = tmpdir();
  std::string text = kSmall;
  text += "trainning: {}\n";  // line 7
  write(d / "bad.yaml", text);
  CliRun r = stepcast("run " + (d / "bad.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.yaml:7:1: trainning"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("training"), std::string::npos) << "suggests the closest key: " << r.err;
}

// A framework rule misspelt in the scenario's `framework:` map: file:line:column and the
// key, exit 2.
TEST(Cli, UnknownFrameworkRuleExitsTwoWithFileLineAndKey) {
  fs::path d = tmpdir();
  std::string text = kSmall;
  text += "framework: {name: megatron-lm, blocking_p2p: false}\n";  // line 7
  write(d / "fw.yaml", text);
  CliRun r = stepcast("run " + (d / "fw.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("fw.yaml:7:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("framework.blocking_p2p"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown key"), std::string::npos) << r.err;
  // A known rule with a value that is not a boolean: same, naming the rule.
  text = kSmall;
  text += "framework: {name: megatron-lm, blocking_p2p_interleaved: maybe}\n";  // line 7
  write(d / "fw.yaml", text);
  r = stepcast("run " + (d / "fw.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("fw.yaml:7:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("framework.blocking_p2p_interleaved"), std::string::npos) << r.err;
}

// Profile keys that would be silent what-ifs are refused with file:line and key (exit 2):
// GPUs without an NVSwitch (not modelled), and a calibrated entry that does not say which
// algorithm it measured (it could not be set aside when that algorithm is off).
TEST(Cli, UnmodelledOrAmbiguousProfileKeysExitTwo) {
  fs::path d = tmpdir();
  std::string text = kSmall;
  text.replace(text.find("nodes: 1}"), 9, "nodes: 1, overrides: {node.nvswitch: false}}");
  write(d / "nvswitch.yaml", text);
  CliRun r = stepcast("run " + (d / "nvswitch.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nvswitch.yaml:3:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cluster.overrides.node.nvswitch: nvswitch: false is not modelled"),
            std::string::npos)
      << r.err;

  write(d / "old.yaml",
        "name: old\n"
        "gpu: {memory: 80 GiB, hbm_bandwidth: 3 TB/s, sms: 132, peak: {bf16: 989 TFLOP/s}}\n"
        "node: {gpus: 8, nvlink: 450 GB/s, nics: 8, nic: 400 Gb/s}\n"
        "collectives:\n"
        "  calibrated:\n"
        "    - {op: allreduce, ranks: 8, nodes: 1, latency: 30 us, busbw: 400 GB/s}\n");
  text = kSmall;
  text.replace(text.find("h100-sxm"), 8, (d / "old.yaml").string());
  write(d / "uses_old.yaml", text);
  r = stepcast("run " + (d / "uses_old.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("old.yaml:6:7: collectives.calibrated[0].algorithm: missing key: name the "
                       "algorithm the entry was measured with"),
            std::string::npos)
      << r.err;
}

// Defects the bad-input fuzzer (tests/sim/scenario/fuzz_test.cc) found, each now exit 2 with
// file:line and key.
// 1,000,000 sequences on 32 GPUs with tp 8 (dp 4): 250,000 microbatches x 8 layers = 2,000,000
// layer passes were under the old limit of 2^21 and the run was killed for memory (~35 GB at
// ~17 KB a pass); the limit is now 2^19 (sim/scenario/scenario.h kMaxLayerPasses).
TEST(Cli, PlansTooLargeToSimulateExitTwoWithFileLineAndKey) {
  fs::path d = tmpdir();
  write(d / "batch.yaml",
        "name: big batch\n"
        "model: {layers: 8, hidden: 1024, ffn_hidden: 4096, heads: 16, vocab: 32000}\n"
        "cluster: {profile: h100-sxm, nodes: 4}\n"
        "training: {seq_len: 65536, global_batch: 1000000}\n"
        "parallel: {tp: 8}\n");
  CliRun r = stepcast("run " + (d / "batch.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("batch.yaml:4:42: training.global_batch: global_batch/(dp*microbatch) = "
                       "250000 microbatches of the model's 8 layers make 2000000 layer passes"),
            std::string::npos)
      << r.err;

  // Full fidelity (stragglers) simulates every rank: the straggler example on 16 nodes with
  // 65,536 sequences is 1024 microbatches x 32 layers x 128 GPUs / pp 1 = 4,194,304 passes
  // (std::bad_alloc, exit 1, before); folded it is 32,768 and runs.
  std::string text = slurp(kSrc + "/scenarios/llama3-8b-straggler-4node-h100.yaml");
  text.replace(text.find("nodes: 4"), 8, "nodes: 16");
  text.replace(text.find("global_batch: 128"), 17, "global_batch: 65536");
  write(d / "strag.yaml", text);
  r = stepcast("run " + (d / "strag.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("strag.yaml:12:5: cluster.stragglers: simulating every rank (full fidelity, "
                       "as stragglers need) holds 1024 microbatches x 32 layers x 128 GPUs / pp 1 "
                       "= 4194304 layer passes, more than the 2097152"),
            std::string::npos)
      << r.err;
  // `lower --fidelity full` of the same plan without stragglers: at cluster.nodes.
  text.erase(text.find("  stragglers:"), text.find("training:") - text.find("  stragglers:"));
  write(d / "full.yaml", text);
  r = stepcast("lower " + (d / "full.yaml").string() + " --fidelity full -o " +
               (d / "p.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.err.find("full.yaml:10:10: cluster.nodes: simulating every rank (full fidelity) holds"),
      std::string::npos)
      << r.err;

  // A task longer than stepcast simulates (seq_len 2^32) is about the whole step (it had no
  // file or line, then the scenario's first line without a key): it is placed at the
  // workload size furthest beyond the largest published one, seq_len 2^32 / 131,072 = 32,768
  // times Llama 3's long context (hidden 2048 and ffn 5632 are below theirs).
  text = slurp(kSrc + "/tests/data/good/moe_interleaved_h200.yaml");
  text.replace(text.find("seq_len: 8192"), 13, "seq_len: 4294967296");
  write(d / "seq.yaml", text);
  r = stepcast("run " + (d / "seq.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("seq.yaml:20:12: training.seq_len: task 'fwd.L0.attn0.mb0' would take"),
            std::string::npos)
      << r.err;
  // Every size at most the published one (seq_len 131,072, hidden 25,600, ffn 102,400:
  // ratios 1, not beyond) and a bf16 peak of 1 GFLOP/s (the least a profile takes): the
  // attention of one 131,072-token sequence, ~4 s^2 h = 1.8e15 FLOPs, takes ~1.85e6 s. It is
  // the profile's doing: placed at cluster.overrides (line 6, its mapping at column 14).
  write(d / "slow.yaml",
        "name: slow profile\n"
        "model: {layers: 2, hidden: 25600, ffn_hidden: 102400, heads: 160, "
        "vocab: 32000}\n"
        "cluster:\n"
        "  profile: h100-sxm\n"
        "  gpus: 1\n"
        "  overrides: {gpu.peak.bf16: 1 GFLOP/s}\n"
        "training: {seq_len: 131072, global_batch: 1}\n");
  r = stepcast("run " + (d / "slow.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("slow.yaml:6:14: cluster.overrides: task 'fwd.L0.attn.mb0' would take"),
            std::string::npos)
      << r.err;

  // Too many gradient buckets with the default bucket size (no parallel.bucket_mb, so the
  // lowering's issue had no line): the MoE example with experts of 2^31 columns puts
  // 1.06e14 parameters in a stage: 2.6e6 buckets > 2^20. Placed at `parallel:`'s mapping
  // (line 24, its first key).
  text = slurp(kSrc + "/tests/data/good/moe_interleaved_h200.yaml");
  text.replace(text.find("ffn_hidden: 5632, every"), 16, "ffn_hidden: 2147483648");
  write(d / "buckets.yaml", text);
  r = stepcast("run " + (d / "buckets.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.err.find("buckets.yaml:24:3: parallel.bucket_mb: 1.06e+14 parameters per pipeline stage"),
      std::string::npos)
      << r.err;
  r = stepcast("lower " + (d / "buckets.yaml").string() + " -o " + (d / "p.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("buckets.yaml:24:3: parallel.bucket_mb: "), std::string::npos) << r.err;
}

// Flags whose bad values were silently accepted: a trace rank outside the cluster (left out
// of the trace without a word), a NaN limit (compares false: never fails the run) or a
// negative tolerance. Each is exit 2 naming the flag.
TEST(Cli, OutOfRangeFlagValuesExitTwo) {
  fs::path d = tmpdir();
  write(d / "s.yaml", kSmall);  // 1 node: global ranks 0-7
  CliRun r = stepcast("run " + (d / "s.yaml").string() + " --trace " + (d / "t.json").string() +
                      " --trace-ranks 0 8");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "stepcast: --trace-ranks: rank 8 is not a global rank of the scenario's 8 GPUs "
            "(0 to 7)\n");
  r = stepcast("run " + (d / "s.yaml").string() + " --trace " + (d / "t.json").string() +
               " --trace-ranks -1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--trace-ranks: rank -1 is not"), std::string::npos) << r.err;
  const std::string cases = kSrc + "/scenarios/validation/cases.yaml";
  r = stepcast("validate --cases " + cases + " --max-mape nan");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --max-mape: expected a finite percentage >= 0, got nan\n");
  r = stepcast("validate --cases " + cases + " --max-error -1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --max-error: expected a finite percentage >= 0, got -1\n");
  r = stepcast("regress --dir " + kSrc + "/scenarios --tolerance nan");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --tolerance: expected a finite percentage >= 0, got nan\n");
}

// A directory given for a file opened and read empty: "the file is empty (expected a YAML
// mapping)" / "not valid JSON". Now it says so.
TEST(Cli, DirectoryOrBadJsonForAFileExitsTwoSayingWhere) {
  fs::path d = tmpdir();
  CliRun r = stepcast("run " + d.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: " + d.string() + ": is a directory, not a YAML file\n");
  r = stepcast("validate " + d.string() + " " + d.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: " + d.string() + ": is a directory, not a JSON file\n");
  // A result file that is not JSON: its line and column (it had neither).
  write(d / "bad.json", "{\n  \"schema\": \"stepcast.result/1\",\n  oops\n}\n");
  r = stepcast("validate " + (d / "bad.json").string() + " " + (d / "bad.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.json:3:3: invalid JSON: syntax error"), std::string::npos) << r.err;
}

// A second YAML document was silently ignored; control characters in text reached the
// terminal. Both exit 2 now (tests/sim/scenario/scenario_test.cc has the rules).
TEST(Cli, SecondYamlDocumentAndControlCharactersExitTwo) {
  fs::path d = tmpdir();
  write(d / "two.yaml", std::string(kSmall) + "---\nname: other\n");  // kSmall: 6 lines
  CliRun r = stepcast("run " + (d / "two.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: " + (d / "two.yaml").string() +
                       ":8:1: a second YAML document (after `---`): the file must hold one\n");
  std::string text = kSmall;
  text.replace(0, text.find('\n'), "name: \"\\x1b[2J\"");  // clears the screen when printed
  write(d / "ctrl.yaml", text);
  r = stepcast("run " + (d / "ctrl.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: " + (d / "ctrl.yaml").string() +
                       ":1:7: name: expected text without control characters, got byte 0x1b\n");
}

TEST(Cli, MissingFileAndBadFlagsExitTwo) {
  EXPECT_EQ(stepcast("run /nonexistent/x.yaml").code, 2);
  EXPECT_EQ(stepcast("run " + kDefault + " --fidelity sometimes").code, 2);
  EXPECT_EQ(stepcast("run " + kDefault + " --no-such-flag").code, 2);
  EXPECT_EQ(stepcast("frobnicate").code, 2);
  EXPECT_EQ(stepcast("").code, 2);
  EXPECT_EQ(stepcast("validate").code, 2);
}

// cluster.stragglers: the run simulates every rank, names the slow GPUs and the critical
// rank, and writes them to the JSON; asking for folding with stragglers is bad input.
TEST(Cli, StragglersRunUnfoldedAndSlowTheStep) {
  fs::path d = tmpdir();
  const std::string base = R"(name: two nodes
model: llama3-8b
cluster:
  profile: h100-sxm
  nodes: 2
training: {seq_len: 2048, global_batch: 32, dtype: bf16, optimizer: adam}
parallel: {tp: 2, pp: 2, microbatch: 1, schedule: 1f1b, zero: 1, sequence_parallel: true}
)";
  std::string slow = base;
  slow.insert(slow.find("training:"), "  stragglers:\n    - {gpu: 11, compute: 0.5}\n");
  write(d / "base.yaml", base);
  write(d / "slow.yaml", slow);
  CliRun b = stepcast("run " + (d / "base.yaml").string() + " --json " + (d / "b.json").string());
  CliRun r = stepcast("run " + (d / "slow.yaml").string() + " --json " + (d / "s.json").string() +
                      " --html " + (d / "s.html").string());
  ASSERT_EQ(b.code, 0) << b.err;
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("  slow     gpu 11: compute x0.5\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("16 simulated ranks (full fidelity)"), std::string::npos) << r.out;
  // GPU 11 is on the last stage (ranks 8-15: tp 2 x dp 4 per stage), dp replica 1, tp rank
  // 1; its pipeline's first stage, ranks 2 and 3, runs the last backward and ends last:
  // the critical rank is the lower of the two.
  EXPECT_NE(r.out.find("  critical rank 2 (the one that ends last)\n"), std::string::npos) << r.out;
  const auto jb = nlohmann::json::parse(slurp(d / "b.json"));
  const auto js = nlohmann::json::parse(slurp(d / "s.json"));
  EXPECT_FALSE(jb.contains("stragglers"));
  EXPECT_EQ(js["stragglers"], "gpu 11: compute x0.5");
  EXPECT_EQ(js["critical_rank"], 2);
  EXPECT_FALSE(js["folded"].get<bool>());
  const std::string html = slurp(d / "s.html");
  EXPECT_NE(html.find("id=\"stragglers\">gpu 11: compute x0.5<"), std::string::npos);
  EXPECT_NE(html.find("id=\"critical-rank\">2<"), std::string::npos);
  EXPECT_GT(js["step_time_s"].get<double>(), jb["step_time_s"].get<double>() * 1.2);

  CliRun f = stepcast("run " + (d / "slow.yaml").string() + " --fidelity folded");
  EXPECT_EQ(f.code, 2);
  EXPECT_NE(f.err.find("slow.yaml:7:5: cluster.stragglers: a slow GPU or link breaks the "
                       "symmetry --fidelity folded relies on"),
            std::string::npos)
      << f.err;
  EXPECT_EQ(stepcast("run " + (d / "slow.yaml").string() + " --fidelity full").code, 0);

  // A sweep over stragglers ([] = none): the table's order is the sweep's, and the slow
  // GPU's point is the slower one by the same amount as the two runs above.
  write(d / "sweep.yaml", base + "sweep:\n  cluster.stragglers: [[], [{gpu: 11, compute: 0.5}]]\n");
  CliRun sw = stepcast("sweep " + (d / "sweep.yaml").string() + " --csv " + (d / "s.csv").string());
  ASSERT_EQ(sw.code, 0) << sw.err;
  // The swept list holds a comma: quoted (RFC 4180), so each line has the header's columns.
  const std::string csv = slurp(d / "s.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;
  EXPECT_NE(csv.find("\n[],"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n\"[{gpu: 11, compute: 0.5}]\",\"tp2 pp2"), std::string::npos) << csv;
  for (const auto* j : {&jb, &js}) {  // the CSV's step times are the runs' (%.9g)
    char step[32];
    std::snprintf(step, sizeof step, ",true,%.9g,", (*j)["step_time_s"].get<double>());
    EXPECT_NE(csv.find(step), std::string::npos) << step << "\n" << csv;
  }

  std::string bad = base;
  bad.insert(bad.find("training:"), "  stragglers:\n    - {gpu: 16, compute: 0.5}\n");
  write(d / "bad.yaml", bad);
  CliRun e = stepcast("run " + (d / "bad.yaml").string());
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("bad.yaml:7:13: cluster.stragglers[0].gpu: expected an integer in [0, 15], "
                       "got 16"),
            std::string::npos)
      << e.err;
}

TEST(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"run", "lower", "sweep", "search", "validate", "regress", "fit"}) {
    CliRun r = stepcast(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, PlanThatDoesNotFitExitsThreeAndStillWritesJson) {
  // Llama 3 70B (70.6e9 params) on 8 GPUs with tp8 and plain DP state: 18 bytes/param / 8
  // = 158.9 GB of training state per GPU > 80 GiB, whatever the activations.
  fs::path d = tmpdir();
  write(d / "big.yaml", R"(name: too big
model: llama3-70b
cluster: {profile: h100-sxm, nodes: 1}
training: {seq_len: 4096, global_batch: 8, dtype: bf16, optimizer: adam}
parallel: {tp: 8, pp: 1, microbatch: 1, schedule: 1f1b, zero: 0, sequence_parallel: true, recompute: full}
)");
  CliRun r = stepcast("run " + (d / "big.yaml").string() + " --json " + (d / "r.json").string());
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos);
  auto j = nlohmann::json::parse(slurp(d / "r.json"));
  EXPECT_FALSE(j["fits_memory"].get<bool>());
  EXPECT_GT(j["memory_peak_gib"].get<double>(), j["memory_capacity_gib"].get<double>());
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
}

// compute.gemm.grouped_efficiency outside (0, 2] is refused where it is written, with the
// key (exit 2): here in a scenario's profile overrides, line 3.
TEST(Cli, GroupedGemmEfficiencyOutOfRangeExitsTwo) {
  fs::path d = tmpdir();
  std::string text = kSmall;
  text.replace(text.find("nodes: 1}"), 9,
               "nodes: 1, overrides: {compute.gemm.grouped_efficiency: 0}}");
  write(d / "grouped.yaml", text);
  const CliRun r = stepcast("run " + (d / "grouped.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("grouped.yaml:3:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cluster.overrides.compute.gemm.grouped_efficiency: expected a number in "
                       "(0, 2]"),
            std::string::npos)
      << r.err;
}

// A reserve the plan cannot fit beside: llama3-8b on one node (tp 2, sp) peaks at 52.61 GiB
// (README block); 30 GiB of the H100's 79.65 kept in reserve leaves 49.65: exit 3, and the
// message says the reserve. 20 GiB leaves 59.65: it fits.
TEST(Cli, MemoryReservedCanMakeAPlanNotFit) {
  fs::path d = tmpdir();
  const std::string plan = R"(name: reserve
model: llama3-8b
training: {seq_len: 8192, global_batch: 128, dtype: bf16, optimizer: adam}
parallel: {tp: 2, pp: 1, cp: 1, microbatch: 1, schedule: 1f1b, zero: 1, sequence_parallel: true,
           recompute: none, overlap: {grad_reduce: true, param_gather: true}, bucket_mb: 40}
)";
  write(d / "tight.yaml", plan +
                              "cluster: {profile: h100-sxm, nodes: 1, overrides: "
                              "{gpu.memory_reserved: 30 GiB}}\n");
  write(d / "roomy.yaml", plan +
                              "cluster: {profile: h100-sxm, nodes: 1, overrides: "
                              "{gpu.memory_reserved: 20 GiB}}\n");
  CliRun tight = stepcast("run " + (d / "tight.yaml").string());
  EXPECT_EQ(tight.code, 3);
  EXPECT_NE(tight.err.find("> 49.65 GiB capacity (30.00 GiB more kept in reserve)"),
            std::string::npos)
      << tight.err;
  CliRun roomy = stepcast("run " + (d / "roomy.yaml").string());
  EXPECT_EQ(roomy.code, 0) << roomy.err;
  EXPECT_NE(roomy.out.find("52.61 GiB of 59.65 GiB (fits; 20.00 GiB more kept in reserve)"),
            std::string::npos)
      << roomy.out;
}

TEST(Cli, LowerWritesVersionedProgram) {
  fs::path d = tmpdir();
  write(d / "s.yaml", kSmall);
  CliRun r = stepcast("lower " + (d / "s.yaml").string() + " -o " + (d / "p.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(slurp(d / "p.json"));
  EXPECT_EQ(j["schema"], "stepcast.program/1");
  EXPECT_FALSE(j["groups"].empty());
  // Folded: one simulated rank per pipeline stage (pp = 2).
  EXPECT_EQ(j["ranks"].size(), 2u);
}

TEST(Cli, SweepRunsEveryCombination) {
  fs::path d = tmpdir();
  std::string text = kSmall;
  text += "sweep:\n  parallel.pp: [1, 2]\n  parallel.microbatch: [1, 2]\n";
  write(d / "s.yaml", text);
  fs::path csv = d / "s.csv";
  CliRun r = stepcast("sweep " + (d / "s.yaml").string() + " --csv " + csv.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // 2 x 2 = 4 points: header + 4 lines in the CSV.
  std::string c = slurp(csv);
  EXPECT_EQ(std::count(c.begin(), c.end(), '\n'), 5);
}

// A sweep none of whose points can run, and a search whose space holds no valid plan, are
// bad input (exit 2), not an empty success: vpp 3 with 1F1B (interleaving needs its
// schedule), tp 3 for 32 heads.
TEST(Cli, SweepAndSearchWithNothingToRunAreBadInput) {
  fs::path d = tmpdir();
  write(d / "sw.yaml", std::string(kSmall) + "sweep:\n  parallel.vpp: [3]\n");
  CliRun r = stepcast("sweep " + (d / "sw.yaml").string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.out.find("invalid:"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("sweep: no point of the sweep can run"), std::string::npos) << r.err;
  write(d / "se.yaml", std::string(kSmall) + "search:\n  tp: [3]\n");
  r = stepcast("search " + (d / "se.yaml").string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("se.yaml:8:3: search: no valid plan in the search space"), std::string::npos)
      << r.err;
}

TEST(Cli, TraceSvgAndHtmlAreWritten) {
  fs::path d = tmpdir();
  write(d / "s.yaml", kSmall);
  CliRun r = stepcast("run " + (d / "s.yaml").string() + " --trace " + (d / "t.json").string() +
                      " --svg " + (d / "p.svg").string() + " --html " + (d / "r.html").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto t = nlohmann::json::parse(slurp(d / "t.json"));
  ASSERT_TRUE(t.contains("traceEvents"));
  int complete = 0;
  for (const auto& e : t["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_GT(complete, 0);
  EXPECT_NE(slurp(d / "p.svg").find("<svg"), std::string::npos);
  EXPECT_NE(slurp(d / "r.html").find("id=\"step-time\""), std::string::npos);
  EXPECT_NE(slurp(d / "r.html").find("id=\"critical-path-longest\""), std::string::npos);
}

// On a terminal (a pseudo-terminal from util-linux `script`), long commands show a progress
// bar on stderr that counts to its total and is cleared at the end.
TEST(Cli, ProgressBarOnlyOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no `script`";
  fs::path d = tmpdir();
  write(d / "s.yaml", kSmall);
  std::string inner =
      std::string(STEPCAST_BINARY_DIR) + "/stepcast run " + (d / "s.yaml").string() + " >/dev/null";
  std::string cmd =
      "script -qec '" + inner + "' " + (d / "typescript").string() + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::string tty = slurp(d / "typescript");
  EXPECT_NE(tty.find("[##########....................] 1/3"), std::string::npos) << tty;
  EXPECT_NE(tty.find("3/3"), std::string::npos) << tty;
}

// Flow mode adds link-utilisation counters (percent of each link class's capacity in use)
// to the trace; one node: only NVLink carries traffic, never above 100 %.
TEST(Cli, FlowModeTraceHasLinkUtilisationCounters) {
  fs::path d = tmpdir();
  std::string text = kSmall;
  text += "network: flow\n";
  write(d / "s.yaml", text);
  CliRun r = stepcast("run " + (d / "s.yaml").string() + " --trace " + (d / "t.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto t = nlohmann::json::parse(slurp(d / "t.json"));
  int samples = 0;
  double max_nvlink = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "C" || e["name"] != "link utilisation %") continue;
    ++samples;
    for (const char* k : {"nvlink", "nic", "leaf_uplink", "pod_uplink"}) {
      EXPECT_GE(e["args"][k].get<double>(), 0.0);
      EXPECT_LE(e["args"][k].get<double>(), 100.0 + 1e-9);
    }
    EXPECT_EQ(e["args"]["nic"].get<double>(), 0.0);
    max_nvlink = std::max(max_nvlink, e["args"]["nvlink"].get<double>());
  }
  EXPECT_GT(samples, 0);
  EXPECT_GT(max_nvlink, 0.0);
}
