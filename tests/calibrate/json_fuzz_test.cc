// Bad JSON input never crashes: random mutations (tests/fuzz.h: hostile values including
// int32/uint32/int64 limits, a 20,000-character string and a value nested 40 deep, deleted,
// unknown, renamed and duplicated keys and elements, 1-3 at once) of each JSON document
// stepcast reads:
//   - measurements.json for `stepcast fit` (parse_measurements): InputError naming the file,
//     a line and the key's JSON pointer;
//   - the lowered Program read back (program_from_json): InputError with file, line, key;
//   - stepcast.result/1 documents compared by `stepcast validate PREDICTED MEASURED`
//     (compare_results): InputError naming the file, a line and the key;
//   - the Program as `stepcast-exec --dry-run` reads, plans and places it
//     (exec::parse_program, make_plan, place_single_process): ProgramError (exit 2) naming
//     the document.
// Any other exception (the CLI's "internal error") fails the test. STEPCAST_FUZZ_SEED and
// STEPCAST_FUZZ_TRIALS (tests/fuzz.h) turn it into a long campaign.
// Found (seeds 201-203 and 211-213 at 3,000 documents per base, 221-222 and 231 at 4,000:
// 144,000 documents; the 105,000 after the fix ran clean): a collective group of 2^31
// wrapped negative in stepcast-exec's reader and crashed its plan (SIGSEGV); now exit 2
// (tests/calibrate/exec_test.cc, exec_cli_test.sh).
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "calibrate/exec/plan.h"
#include "calibrate/exec/program.h"
#include "calibrate/fit/measurements.h"
#include "model/error.h"
#include "sim/lower/lower.h"
#include "sim/program/program_json.h"
#include "sim/report/report.h"
#include "sim/report/validate.h"
#include "sim/scenario/scenario.h"
#include "tests/fuzz.h"

namespace stepcast {
namespace {

using fuzz::Tally;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The Program of the executor's 8-GPU scenario (tp, pp, dp, every task kind) made smaller
// (2 layers, 2 microbatches: dp = 8 / (tp*pp) = 2, 4 / (2*1) = 2 microbatches) so that a
// document reads in milliseconds; folded (what the simulator reads back) or full (every rank:
// what stepcast-exec runs; a folded one lists only the groups of the simulated ranks, which
// the executor refuses for dp > 1).
std::string program_text(bool folded) {
  const std::string file = std::string(STEPCAST_SOURCE_DIR) + "/tests/data/exec/tiny_8gpu.yaml";
  YAML::Node doc = YAML::LoadFile(file);
  doc["model"]["layers"] = 2;
  doc["training"]["global_batch"] = 4;
  const Scenario s = load_scenario_node(doc, file);
  LowerOptions lo;
  lo.folded = folded;
  return write_program_json(lower(s, lo), -1);
}

// Mutates `base` `trials` times and runs `body` on each mutated document's text.
template <class F>
Tally fuzz_json(const nlohmann::json& base, const std::string& name, unsigned long seed, int trials,
                F&& body) {
  std::mt19937 rng = fuzz::rng_for(seed);
  Tally t;
  for (int trial = 0; trial < trials; ++trial) {
    std::string what;
    const nlohmann::json m = fuzz::mutate(base, rng, what);
    fuzz::announce(name + ": " + what);
    body(m, name + ": " + what, t);
  }
  std::printf("fuzz: %s x %d documents: %d ran, %d refused\n", name.c_str(), trials, t.ran,
              t.refused);
  return t;
}

TEST(JsonFuzz, MutatedMeasurementsLoadOrFailWithAnInputErrorNamingFileLineAndKey) {
  const std::string dir = std::string(STEPCAST_SOURCE_DIR) + "/tests/data/calibration/";
  // One file with GEMMs, one with collectives over several rank counts, and grouped GEMMs
  // as stepcast-bench writes them (calibrate/bench/output.cu).
  const std::vector<std::pair<std::string, std::string>> docs = {
      {"h100_azure_gemm_fp8.json", read_text(dir + "h100_azure_gemm_fp8.json")},
      {"a100_stas00_allreduce.json", read_text(dir + "a100_stas00_allreduce.json")},
      {"grouped.json", R"({"schema": "stepcast.measurements/1", "source": "stepcast-bench",
        "provenance": {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
        "grouped_gemm": [
          {"m": 4096, "n": 1536, "k": 2048, "groups": 16, "dtype": "bf16", "phase": "fwd",
           "layout": "TN", "streams": 4, "origin": "grid", "time_us": 800,
           "flop_per_s": 515.4e12, "repeats": 20},
          {"m": 2048, "n": 1536, "k": 512, "groups": 4, "dtype": "fp8", "phase": "bwd_weight",
           "layout": "TN", "streams": 4, "origin": "program", "time_us": 20,
           "flop_per_s": 644.2e12, "repeats": 20}]})"}};
  for (const auto& [f, text] : docs) {
    const Tally t = fuzz_json(nlohmann::json::parse(text), f, 1101, fuzz::trials(150),
                              [&](const nlohmann::json& m, const std::string& ctx, Tally& tally) {
                                fuzz::expect_runs_or_refuses(
                                    [&] { (void)parse_measurements(m.dump(1), f); }, ctx, tally,
                                    /*needs_line=*/true, /*document_level=*/"no measurements");
                              });
    if (!fuzz::campaign()) {
      EXPECT_GT(t.refused, 50) << f;
    }
  }
}

TEST(JsonFuzz, MutatedProgramsReadOrFailWithAnInputErrorNamingFileLineAndKey) {
  const Tally t =
      fuzz_json(nlohmann::json::parse(program_text(true)), "program.json", 2202, fuzz::trials(150),
                [&](const nlohmann::json& m, const std::string& ctx, Tally& tally) {
                  fuzz::expect_runs_or_refuses(
                      [&] { (void)program_from_json(m.dump(1), "program.json"); }, ctx, tally);
                });
  if (!fuzz::campaign()) {
    EXPECT_GT(t.refused, 50);
  }
}

TEST(JsonFuzz, MutatedResultsCompareOrFailWithAnInputErrorNamingFileLineAndKey) {
  const Scenario s =
      load_scenario(std::string(STEPCAST_SOURCE_DIR) + "/tests/data/exec/tiny_8gpu.yaml");
  const std::string good = result_to_json(predict(s).result).dump(1);
  const Tally t =
      fuzz_json(nlohmann::json::parse(good), "result.json", 3303, fuzz::trials(150),
                [&](const nlohmann::json& m, const std::string& ctx, Tally& tally) {
                  const std::string text = m.dump(1);
                  fuzz::expect_runs_or_refuses(
                      [&] {
                        nlohmann::json out;
                        (void)compare_results(text, "predicted.json", good, "measured.json", &out);
                        (void)compare_results(good, "predicted.json", text, "measured.json", &out);
                      },
                      ctx, tally);
                });
  if (!fuzz::campaign()) {
    // The schema and step_time_s are required; the section values must be seconds.
    EXPECT_GT(t.refused, 20);
  }
}

TEST(JsonFuzz, MutatedProgramsDryRunOrFailWithAProgramError) {
  // stepcast-exec --dry-run: parse, plan, place on world_size GPUs (calibrate/exec/main.cc).
  const Tally t =
      fuzz_json(nlohmann::json::parse(program_text(false)), "program.json", 4404, fuzz::trials(60),
                [&](const nlohmann::json& m, const std::string& ctx, Tally& tally) {
                  try {
                    const exec::Program p = exec::parse_program(m.dump(1), "program.json");
                    exec::Plan plan = exec::make_plan(p);
                    exec::place_single_process(plan, p.world_size);
                    ++tally.ran;
                  } catch (const exec::ProgramError& e) {
                    ++tally.refused;
                    EXPECT_NE(std::string(e.what()).find("program.json"), std::string::npos)
                        << ctx << ": " << e.what();
                  } catch (const std::exception& e) {
                    ADD_FAILURE() << ctx << ": not a ProgramError: " << e.what();
                  }
                });
  if (!fuzz::campaign()) {
    EXPECT_GT(t.refused, 30);
  }
}

}  // namespace
}  // namespace stepcast
