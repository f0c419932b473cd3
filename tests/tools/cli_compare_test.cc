// End-to-end tests of tools/stepcast's binary: regress, fit and validate (comparing predictions
// with expected results and measurements): exit codes, messages, output.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fs = std::filesystem;
using namespace cli_test;

TEST(Cli, RegressDetectsMovesUpdatesAndMissingFiles) {
  fs::path d = tmpdir();
  write(d / "sc" / "a.yaml", kSmall);
  // Missing expected file: reported, exit 1.
  CliRun r = stepcast("regress --dir " + (d / "sc").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("missing expected file"), std::string::npos) << r.out;
  // --update writes it; then everything is within tolerance.
  ASSERT_EQ(stepcast("regress --update --dir " + (d / "sc").string()).code, 0);
  EXPECT_TRUE(fs::exists(d / "sc" / "expected" / "a.json"));
  r = stepcast("regress --dir " + (d / "sc").string());
  EXPECT_EQ(r.code, 0) << r.out;
  // A changed profile value (half the HBM bandwidth) moves memory-bound work: step time
  // and breakdown rows move, memory does not.
  std::string changed = kSmall;
  changed.replace(
      changed.find("cluster: {profile: h100-sxm, nodes: 1}"),
      std::string("cluster: {profile: h100-sxm, nodes: 1}").size(),
      "cluster: {profile: h100-sxm, nodes: 1, overrides: {gpu.hbm_bandwidth: 1.675 TB/s}}");
  write(d / "sc" / "a.yaml", changed);
  r = stepcast("regress --dir " + (d / "sc").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("step_time_s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("breakdown_s.compute"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("memory_peak_gib "), std::string::npos) << r.out;
  r = stepcast("regress --json --dir " + (d / "sc").string());
  auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_GE(j["rows"].size(), 2u);
  // A generous tolerance accepts the move; --update makes it pass exactly.
  ASSERT_EQ(stepcast("regress --update --dir " + (d / "sc").string()).code, 0);
  EXPECT_EQ(stepcast("regress --dir " + (d / "sc").string()).code, 0);
  // Bad input: exit 2.
  CliRun nope = stepcast("regress --dir " + (d / "nope").string());
  EXPECT_EQ(nope.code, 2);
  EXPECT_EQ(nope.err, "stepcast: " + (d / "nope").string() + ": --dir: not a directory\n");
}

// fit --base with an unknown profile named the scenario key cluster.profile (there is no
// scenario): now the flag, exit 2.
TEST(Cli, FitWithAnUnknownBaseProfileNamesTheFlag) {
  fs::path d = tmpdir();
  CliRun r = stepcast("fit " + kSrc + "/tests/data/calibration/h100_azure_gemm_fp8.json --base " +
                      "h100-sxn -o " + (d / "f.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("stepcast: --base: unknown profile \"h100-sxn\" (known in ", 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find("did you mean 'h100-sxm'?"), std::string::npos) << r.err;
}

TEST(Cli, ValidateComparesTwoResults) {
  fs::path d = tmpdir();
  write(d / "s.yaml", kSmall);
  ASSERT_EQ(stepcast("run " + (d / "s.yaml").string() + " --json " + (d / "p.json").string()).code,
            0);
  CliRun r = stepcast("validate --json " + (d / "p.json").string() + " " + (d / "p.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["rows"].empty());
  for (const auto& row : j["rows"]) EXPECT_EQ(row["error"].get<double>(), 0.0);
  write(d / "junk.json", "{\"schema\": \"something/else\"}");
  r = stepcast("validate " + (d / "p.json").string() + " " + (d / "junk.json").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("junk.json"), std::string::npos);
}

// validate PREDICTED MEASURED: every bad value is reported at its file:line:col with its key,
// all at once, exit 2 (issues had line 0; a section value that was not a number was skipped
// silently, a measured step of 0 divided). A name in only one file is left out.
TEST(Cli, ValidateBadResultValuesExitTwoAtTheirLineAndKey) {
  fs::path d = tmpdir();
  write(d / "s.yaml", kSmall);
  const std::string p = (d / "p.json").string();
  ASSERT_EQ(stepcast("run " + (d / "s.yaml").string() + " --json " + p).code, 0);
  // Columns: line 3 `  "step_time_s": 0,` puts 0 at 2 + 14 + 2 = 18; line 4 puts -1 at
  // 2 + 16 (key) + 2 (": ") + 1 ("{") + 6 ("gemm") + 2 + 1 = 30 and "fast" at 30 + 2 (-1)
  // + 2 (", ") + 11 ("attention") + 2 = 47; line 5 `  "breakdown_s": [1]` puts [ at 18.
  write(d / "m.json",
        "{\n"
        "  \"schema\": \"stepcast.result/1\",\n"
        "  \"step_time_s\": 0,\n"
        "  \"busy_by_kind_s\": {\"gemm\": -1, \"attention\": \"fast\"},\n"
        "  \"breakdown_s\": [1]\n"
        "}\n");
  const std::string m = (d / "m.json").string();
  CliRun r = stepcast("validate " + p + " " + m);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: " + m +
                       ":3:18: step_time_s: expected a positive finite number of seconds "
                       "(the errors divide by it), got 0\n"
                       "stepcast: " +
                       m +
                       ":4:30: busy_by_kind_s.gemm: expected a non-negative finite number "
                       "of seconds, got -1\n"
                       "stepcast: " +
                       m +
                       ":4:47: busy_by_kind_s.attention: expected a non-negative finite "
                       "number of seconds, got string\n"
                       "stepcast: " +
                       m +
                       ":5:18: breakdown_s: expected a mapping of names to seconds, got "
                       "array\n");
  // A missing key is placed at the object that lacks it; the predicted file is checked too.
  write(d / "q.json", "\n  {\"schema\": \"stepcast.result/1\"}\n");
  write(d / "x.json", "{\"schema\": \"stepcast.result/2\"}");
  const std::string q = (d / "q.json").string(), x = (d / "x.json").string();
  r = stepcast("validate " + x + " " + q);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: " + x +
                       ":1:12: schema: expected a \"stepcast.result/1\" document\n"
                       "stepcast: " +
                       q + ":2:3: step_time_s: missing or not a number\n");
  // A measured timeline with one kind and no phases: only the step and that kind compare
  // (predicted 2 x measured: error +100%).
  const nlohmann::json pred = nlohmann::json::parse(slurp(p));
  const double step = pred["step_time_s"].get<double>();
  const double gemm = pred["busy_by_kind_s"]["gemm"].get<double>();
  write(d / "one.json", nlohmann::json{{"schema", "stepcast.result/1"},
                                       {"step_time_s", step / 2},
                                       {"busy_by_kind_s", {{"gemm", gemm / 2}}}}
                            .dump(1));
  r = stepcast("validate --json " + p + " " + (d / "one.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out)["rows"];
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0]["what"], "step");
  EXPECT_EQ(rows[1]["what"], "busy_by_kind.gemm");
  for (const auto& row : rows) EXPECT_NEAR(row["error"].get<double>(), 1.0, 1e-12);
}

// A cases file of the given validation cases, each "measured" at 1 s.
std::string cases_file(const std::vector<const char*>& ids) {
  fs::path d = tmpdir();
  const std::string v = kSrc + "/scenarios/validation/";
  std::string cases = "cases:\n";
  for (const char* id : ids)
    cases += std::string("- id: ") + id + "\n  source: test\n  scenario: " + v + id +
             ".yaml\n  measured: {step_time_s: 1.0}\n";
  write(d / "cases.yaml", cases);
  return (d / "cases.yaml").string();
}

// A case whose scenario file does not exist (the fuzzer's `scenario: -1`) was "cannot open
// the file" with neither the cases file's line nor the key; now both, exit 2.
TEST(Cli, ValidateCaseWithoutAScenarioExitsTwoWithLineAndKey) {
  fs::path d = tmpdir();
  write(d / "cases.yaml",
        "cases:\n"
        "- id: a\n"
        "  source: test\n"
        "  scenario: missing.yaml\n"
        "  measured: {step_time_s: 1.0}\n");
  CliRun r = stepcast("validate --cases " + (d / "cases.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cases.yaml:4:13: cases[0].scenario: no scenario file " +
                       (d / "missing.yaml").string()),
            std::string::npos)
      << r.err;
  // A list where the scenario goes (the fuzzer's `scenario: []`) was "cases.yaml:1:1:
  // expected a mapping", with no key.
  write(d / "list.yaml",
        "cases:\n"
        "- id: a\n"
        "  source: test\n"
        "  scenario: [1, 2]\n"
        "  measured: {step_time_s: 1.0}\n");
  r = stepcast("validate --cases " + (d / "list.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("list.yaml:4:13: cases[0].scenario: expected a scenario file name or the "
                       "scenario inline (a mapping), got a list"),
            std::string::npos)
      << r.err;
}

// validate --cases on worker threads: the same report as on one thread (cases are
// predicted in parallel, the report is assembled in case order); --threads 0 is bad input.
TEST(Cli, ValidateCasesGivesTheSameReportOnAnyNumberOfThreads) {
  const std::string base =
      "validate --json --cases " +
      cases_file({"mcore-h100-1.7B", "mcore-h100-7.1B", "korthikanti2022-t5-22B-sp-selective"});
  CliRun one = stepcast(base + " --threads 1");
  ASSERT_EQ(one.code, 0) << one.err;
  CliRun three = stepcast(base + " --threads 3");
  ASSERT_EQ(three.code, 0) << three.err;
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(nlohmann::json::parse(one.out)["cases"].size(), 3u);
  CliRun bad = stepcast(base + " --threads 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--threads: Value 0 not in range 1 to 1024"), std::string::npos)
      << bad.err;
  bad = stepcast("regress --threads x");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--threads"), std::string::npos) << bad.err;
}

// validate --cases groups the cases by framework, kind and source family (the family: the
// id up to its first '-' unless given); --families and --kinds keep some; --scan predicts every
// case at each value of a profile key and prints the fit and the leave-one-family-out error. Both
// cases are "measured" at 1 s and predicted well under it, so the slower H100 clock (0.5)
// is the better fit, with and without the A100 family (whose errors it does not move).
TEST(Cli, ValidateGroupsCasesAndLeavesOneFamilyOut) {
  const std::string cases = cases_file({"mcore-h100-1.7B", "korthikanti2022-t5-22B-sp-selective"});
  CliRun r = stepcast("validate --json --cases " + cases);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cases"][0]["family"], "mcore");
  EXPECT_EQ(j["cases"][0]["framework"], "megatron-core");
  EXPECT_EQ(j["cases"][0]["kind"], "dense");
  EXPECT_EQ(j["cases"][1]["framework"], "megatron-lm");
  EXPECT_EQ(j["mape_by_family"]["korthikanti2022"]["cases"], 1);
  r = stepcast("validate --cases " + cases);
  EXPECT_NE(r.out.find("MAPE by framework: megatron-core "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MAPE by family: korthikanti2022 "), std::string::npos) << r.out;
  r = stepcast("validate --json --cases " + cases + " --families mcore");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["cases"].size(), 1u);
  r = stepcast("validate --cases " + cases + " --families nope");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --families: no case of these families\n");
  // --kinds keeps the cases of those kinds of plan (case_kind); a name that is not a kind,
  // or a filter that leaves nothing, is one message naming the flag, exit 2.
  const std::string mixed = cases_file({"mcore-h100-1.7B", "mb2509-h100-qwen3-30b-a3b-tokendrop"});
  r = stepcast("validate --json --cases " + mixed + " --kinds moe");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json moe = nlohmann::json::parse(r.out);
  ASSERT_EQ(moe["cases"].size(), 1u);
  EXPECT_EQ(moe["cases"][0]["kind"], "moe");
  r = stepcast("validate --cases " + mixed + " --kinds moe");
  EXPECT_EQ(r.out.find("non-MoE"), std::string::npos) << r.out;  // none to average
  r = stepcast("validate --json --cases " + mixed + " --kinds dense,moe");
  EXPECT_EQ(nlohmann::json::parse(r.out)["cases"].size(), 2u);
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--cases " + mixed + " --kinds mo", "unknown kind \"mo\" (dense, cp, fsdp, moe)"},
           {"--cases " + cases + " --kinds fsdp", "no case of these kinds"},
           {"--cases " + mixed + " --kinds moe --families mcore",
            "no case of these kinds in these families"},
           {"a.json b.json --kinds moe", "applies to --cases only"}}) {
    r = stepcast("validate " + args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.err, "stepcast: --kinds: " + message + "\n");
  }
  r = stepcast("validate --cases " + cases + " --scan h100-sxm:compute.sustained_clock=0.5,0.73");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Fitted on all cases: 0.5,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Leave-one-family-out MAPE"), std::string::npos) << r.out;
  for (const char* bad : {"junk", "compute.sustained_clock=0.7", "k=0.7,x"}) {
    r = stepcast("validate --cases " + cases + " --scan '" + bad + "'");
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--scan: expected [PROFILE:]KEY=V1,V2,..."), std::string::npos) << r.err;
  }
  r = stepcast("validate --json --cases " + cases + " --scan compute.sustained_clock=0.5,0.7");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --scan: prints a table: not with --json\n");
}

// A case predicted over its GPUs' memory is marked in the table and named below it (the run
// fit: a memory miss the step's MAPE does not show); the JSON says fits_memory. The peak is
// whatever the model gives (81.0 GiB of 79.6 since Apex's master-weight remainders): the
// marking is what is tested, with the table's peak and the line below it agreeing.
TEST(Cli, ValidateMarksCasesPredictedOverMemory) {
  CliRun r = stepcast("validate --cases " + cases_file({"nemo2407-h100-nemotron4-340b"}));
  ASSERT_EQ(r.code, 0) << r.err;
  std::smatch over, below;
  ASSERT_TRUE(std::regex_search(r.out, over, std::regex(" over ([0-9]+\\.[0-9])"))) << r.out;
  ASSERT_TRUE(std::regex_search(r.out, below,
                                std::regex("predicted not to fit in GPU memory, though the run "
                                           "did: nemo2407-h100-nemotron4-340b \\(([0-9]+\\.[0-9]) "
                                           "of 79\\.6 GiB\\)")))
      << r.out;
  EXPECT_EQ(over[1].str(), below[1].str());
  EXPECT_GT(std::stod(over[1].str()), 79.6);
  r = stepcast("validate --json --cases " + cases_file({"nemo2407-h100-nemotron4-340b"}));
  EXPECT_FALSE(nlohmann::json::parse(r.out)["cases"][0]["fits_memory"].get<bool>());
}

// validate --cases --override [PROFILE:]KEY=VALUE: sets a profile key for every case of
// that profile (how the README's scan of compute.sustained_clock is reproduced). A slower
// sustained clock slows the H100 case and leaves the A100 case alone; without a profile
// prefix both move; bad forms and unknown keys are one message naming --override, exit 2.
TEST(Cli, ValidateOverridesAProfileKeyForItsCases) {
  const std::string base = "validate --json --cases " +
                           cases_file({"mcore-h100-1.7B", "korthikanti2022-t5-22B-sp-selective"});
  auto steps = [&](const std::string& extra) {
    CliRun r = stepcast(base + extra);
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<double> out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    for (const auto& c : j["cases"]) out.push_back(c["predicted_step_time_s"].get<double>());
    return out;
  };
  const auto plain = steps("");
  ASSERT_EQ(plain.size(), 2u);
  const auto h100_only = steps(" --override h100-sxm:compute.sustained_clock=0.5");
  EXPECT_GT(h100_only[0], 1.3 * plain[0]);  // compute at 0.5 instead of 0.73 of boost
  EXPECT_EQ(h100_only[1], plain[1]);        // the A100 case is untouched
  const auto both = steps(" --override compute.sustained_clock=0.5");
  EXPECT_EQ(both[0], h100_only[0]);
  EXPECT_GT(both[1], 1.3 * plain[1]);
  // The scenario's own value is restated, nothing moves.
  EXPECT_EQ(steps(" --override h100-sxm:compute.sustained_clock=0.73"), plain);
  for (const char* bad : {"junk", "=1", "compute.sustained_clock=", ":compute.x=1"}) {
    CliRun r = stepcast(base + " --override '" + bad + "'");
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--override: expected [PROFILE:]KEY=VALUE"), std::string::npos) << r.err;
  }
  CliRun r = stepcast(base + " --override compute.nope=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --override: compute.nope: unknown key\n");
  // A profile no case runs on (a typo in its name) would change nothing and leave the key
  // unchecked: refused.
  r = stepcast(base + " --override h100-sx:compute.sustained_clock=0.5");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "stepcast: --override: no case runs on profile \"h100-sx\" (the cases' profiles: "
            "a100-80g-sxm, h100-sxm)\n");
  // A flag that would do nothing is refused, not ignored.
  r = stepcast("run " + kDefault + " --trace-ranks 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --trace-ranks: needs --trace FILE\n");
  // Comparing two result files takes no profile: the flag is refused, not ignored.
  r = stepcast("validate a.json b.json --override compute.sustained_clock=0.5");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --override: applies to --cases only\n");
  r = stepcast("validate a.json b.json --max-mape 5");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --max-mape: applies to --cases only\n");
  r = stepcast("validate a.json b.json --threads 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --threads: applies to --cases only\n");
  r = stepcast(base + " --override compute.sustained_clock=fast");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--override: compute.sustained_clock: expected a number"), std::string::npos)
      << r.err;
  // A bad value for one profile's key is one message: the case it refuses is not then
  // missed from the profiles the cases run on.
  r = stepcast(base + " --override h100-sxm:compute.launch_overhead=2e-6");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "stepcast: --override: compute.launch_overhead: expected a time with a unit (e.g. "
            "\"2 us\", \"1.5 ms\"), got the bare number \"2e-6\"\n");
}

// The ratchet's limits: --max-mape on the mean, --max-error on every case. Two cases
// measured at 1 s: their errors are what the JSON report says, so the limits can be put
// just below and just above them; each case over --max-error is named, exit 1.
TEST(Cli, ValidateLimitsFailTheRunAndNameTheCases) {
  const std::string base =
      "validate --cases " + cases_file({"mcore-h100-1.7B", "korthikanti2022-t5-22B-sp-selective"});
  CliRun r = stepcast(base + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const double mape = 100 * j["mape"].get<double>();
  const double e0 = 100 * std::fabs(j["cases"][0]["error"].get<double>());
  const double e1 = 100 * std::fabs(j["cases"][1]["error"].get<double>());
  ASSERT_GT(e0, e1 + 1);  // the 1.7B (0.37 s) misses 1 s by more than the 22B (1.07 s)
  auto pct = [](double x) { return std::to_string(x); };
  EXPECT_EQ(stepcast(base + " --max-mape " + pct(mape + 0.01)).code, 0);
  r = stepcast(base + " --max-mape " + pct(mape - 0.01));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("exceeds --max-mape"), std::string::npos) << r.err;
  EXPECT_EQ(stepcast(base + " --max-error " + pct(e0 + 0.01)).code, 0);
  // Between the two errors: only the 1.7B is named.
  r = stepcast(base + " --max-error " + pct((e0 + e1) / 2));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("mcore-h100-1.7B: error -"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("korthikanti"), std::string::npos) << r.err;
  // Below both: both are named, one line each.
  r = stepcast(base + " --max-error " + pct(e1 - 0.01));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  // The table's summary counts the cases within 5% and 10% and names those beyond: the
  // 1.7B (0.37 s against 1 s) always; the 22B (about 1.07 s) by its JSON error.
  r = stepcast(base);
  ASSERT_EQ(r.code, 0);
  const int w5 = (e0 <= 5) + (e1 <= 5), w10 = (e0 <= 10) + (e1 <= 10);
  EXPECT_EQ(j["cases_within_5pct"].get<int>(), w5);
  EXPECT_EQ(j["cases_within_10pct"].get<int>(), w10);
  EXPECT_NE(r.out.find("within 5%: " + std::to_string(w5) + " cases; within 10%: " +
                       std::to_string(w10) + "; worse than 10%: mcore-h100-1.7B"),
            std::string::npos)
      << r.out;
  // One case per profile: each profile's MAPE is its case's error.
  EXPECT_NEAR(100 * j["mape_by_profile"]["h100-sxm"]["mape"].get<double>(), e0, 1e-9);
  EXPECT_NEAR(100 * j["mape_by_profile"]["a100-80g-sxm"]["mape"].get<double>(), e1, 1e-9);
  EXPECT_EQ(j["mape_by_profile"]["h100-sxm"]["cases"].get<int>(), 1);
  EXPECT_NE(r.out.find("MAPE by profile: a100-80g-sxm "), std::string::npos) << r.out;
  r = stepcast("validate a.json b.json --max-error 5");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --max-error: applies to --cases only\n");
}

// validate --tasks: the H200 executor run of the 1.7B case (tests/data/measured/) against
// the scenario's own task costs, by label; its flags are checked like the others.
TEST(Cli, ValidateTasksComparesATimelineByLabel) {
  const std::string meas =
      kSrc + "/tests/data/measured/h200-2026-12-04/exec/mcore_1.7B_1gpu.measured.json";
  const std::string scen = kSrc + "/tests/data/exec/mcore_1.7B_1gpu.yaml";
  CliRun r = stepcast("validate --tasks " + scen + " " + meas + " --top 3");
  ASSERT_EQ(r.code, 0) << r.err;
  // 1,164 GEMMs, 192 attention, 794 memory-bound tasks (the Program's, docs/calibration.md).
  EXPECT_NE(r.out.find("gemm          (all)                                1164"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("more label groups (--top 0: all)"), std::string::npos) << r.out;
  r = stepcast("validate --tasks " + scen + " " + meas + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kinds"].size(), 3u);
  // The run's idle GPU time (the step, 449.79 ms, minus the tasks' busy spans: 3.64 ms) is
  // the timing events': every task started 1.2-1.7 us after it was ready, 3.64 ms in all,
  // and the 103 allocs, which launch nothing, spanned a median 1.2-1.4 us (the frees 2.0: a
  // stream-ordered cudaFreeAsync).
  const nlohmann::json& floor = j["floor"];
  EXPECT_EQ(floor["tasks"].get<int>(), 2356);
  EXPECT_EQ(floor["kernelless_tasks"].get<int>(), 206);
  EXPECT_GT(floor["wait_median_s"].get<double>(), 1.2e-6);
  EXPECT_LT(floor["wait_median_s"].get<double>(), 1.7e-6);
  EXPECT_NEAR(floor["wait_sum_s"].get<double>(), 3.64e-3, 0.05e-3);
  EXPECT_GT(floor["kernelless_median_s"].get<double>(), 1.2e-6);
  EXPECT_LT(floor["kernelless_median_s"].get<double>(), 1.4e-6);
  // The tiny case's timeline against the 1.7B scenario: task counts differ, exit 2.
  r = stepcast("validate --tasks " + scen + " " + kSrc +
               "/tests/data/measured/h200-2026-12-04/exec/tiny_1gpu.measured.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/timeline/0/tasks_s: 126 tasks, but rank 0 of the scenario's Program has "
                       "2356"),
            std::string::npos)
      << r.err;
  r = stepcast("validate --tasks " + scen + " a.json b.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --tasks: give one MEASURED.json (with a timeline)\n");
  r = stepcast("validate a.json b.json --top 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "stepcast: --top: applies to --tasks only\n");
}
