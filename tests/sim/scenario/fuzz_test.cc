// Bad input never crashes: random mutations of real scenarios and hardware profiles are
// loaded and predicted as `stepcast run` does, their sweep: points run as `stepcast sweep`
// does and a few search plans as `stepcast search` does. Each must either run or fail with
// InputError whose every issue names a file, a line and a key (exit code 2 in the CLI) —
// never another exception (exit 4, "internal error"), a crash or a hang.
//
// Mutations (tests/fuzz.h): 1 (half the documents) or 2-3 at once, each one of: a value
// replaced by a hostile one (bad numbers, wrong types, numbers at the int32/uint32/int64
// limits, a 20,000-character string, a value nested 40 deep), a key deleted, an unknown key
// added, a key renamed with a typo or the wrong case (tp -> TP), a sequence element
// duplicated, a mapping replaced by a scalar.
//
// CTest runs a fixed seed and a few mutations per base file (about 2 s); a developer runs a
// long campaign with STEPCAST_FUZZ_SEED=<n> STEPCAST_FUZZ_TRIALS=<per base file>, e.g.
//   STEPCAST_FUZZ_SEED=5 STEPCAST_FUZZ_TRIALS=1000 build/tests/sim/scenario/scenario_fuzz_test
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "model/error.h"
#include "sim/report/explore.h"
#include "sim/report/report.h"
#include "sim/report/validate.h"
#include "sim/scenario/scenario.h"
#include "tests/fuzz.h"

namespace stepcast {
namespace {

namespace fs = std::filesystem;
using fuzz::Tally;

// Runs a scenario file as the CLI does: load, predict (full fidelity with stragglers); then
// up to `points` of its sweep points (sweep_candidates, each loaded without its sweep: block
// as explore.cc does) and, when `search`, the first plan of the search space and one at
// random (search_candidates, with search's run options).
void run_scenario(const std::string& file, const std::string& ctx, bool search, int points,
                  std::mt19937& rng, Tally& t) {
  Scenario s;
  try {
    s = load_scenario(file);
  } catch (const InputError& e) {
    ++t.refused;
    fuzz::expect_located(e, ctx);
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << ctx << ": not an InputError: " << e.what();
    return;
  }
  fuzz::expect_runs_or_refuses(
      [&] {
        RunOptions opt;
        opt.folded = s.stragglers.empty();
        (void)predict(s, opt);
      },
      ctx, t);
  // Sweep points run the plain pipeline, search plans the search's pruned one.
  auto run_point = [&](const PlanCandidate& c, const SearchRunOptions& opt,
                       const std::string& what) {
    fuzz::expect_runs_or_refuses(
        [&] {
          YAML::Node doc = YAML::Clone(c.document());
          doc.remove("sweep");
          const Scenario p = load_scenario_node(doc, s.file);
          SearchRunOptions o = opt;
          o.folded = p.stragglers.empty();
          (void)predict_pruned(p, o);
        },
        ctx + " [" + what + "]", t);
  };
  if (!s.sweep.empty()) {
    const std::vector<PlanCandidate> cands = sweep_candidates(s);
    for (int i = 0; i < points && !cands.empty(); ++i) {
      const std::size_t k = rng() % cands.size();
      run_point(cands[k], {}, "sweep point " + std::to_string(k));
    }
  }
  if (search) {
    std::vector<PlanCandidate> cands;
    fuzz::expect_runs_or_refuses([&] { cands = search_candidates(s); }, ctx + " [search space]", t);
    if (!cands.empty()) {
      const SearchRunOptions opt = search_run_options(SearchOptions{});
      run_point(cands.front(), opt, "search plan 0");
      const std::size_t k = rng() % cands.size();
      run_point(cands[k], opt, "search plan " + std::to_string(k));
    }
  }
}

// What it found. First version (7 bases, single mutations; seeds 20261203/31 and 777/778 at
// 600-800 mutations per file): a straggler speed of 1e-300, efficiencies of 1e-300,
// comm_sms >= sms and bucket_mb ~ 0 (each now a located InputError) and missing keys under
// an override-created mapping reported without a line. This version (campaigns of seeds
// 101-104 x 300, 111-116 x 400, 121-123 and 131-132 x 500 documents per base file: 122,000
// scenario, profile and cases documents; the last 98,000 ran clean after the fixes): 2,000,000
// layer passes under the old limit killed for memory, full-fidelity plans past it
// (std::bad_alloc), step-level limits (task > 1e6 s) and gradient-bucket counts without
// file or line, and a validation case whose scenario file is missing or not a mapping
// reported without line or key (tests in tests/tools/cli_test.cc). The step-level limits
// then named the file and first line without a key; they now name a key too
// (sim/report/report.cc, whole_step_key), and every refusal here must.

struct Base {
  std::string file;  // relative to the source tree
  bool search;       // also fuzz the search space from it
};

// One base per feature: dense analytical with overlap off; MoE + expert, context and
// interleaved pipeline parallelism, ZeRO-3, fp8, flow network; a partial node with gpipe, sgd,
// uneven pipeline_layers and profile overrides; flow mode over pods with zb-h1, all-gather
// context parallelism, ZeRO-2 and TP overlap; two sweep: blocks (one over overrides);
// stragglers; FSDP (ZeRO-3, full recompute); Mixtral (ep with whole experts); 405B (vpp 2,
// ZeRO-2, uneven stages, 16,384 GPUs); 70B interleaved vpp 5; GPT-3 on A100; the 1-node
// default; two validation scenarios (Megatron-Core on H100, Korthikanti's sp + selective).
const std::vector<Base>& bases() {
  static const std::vector<Base> b = {
      {"tests/data/good/dense_h100.yaml", true},
      {"tests/data/good/moe_interleaved_h200.yaml", true},
      {"tests/data/good/partial_node_a100.yaml", false},
      {"tests/data/good/pods_flow_h100.yaml", true},
      {"tests/data/good/sweep_h100.yaml", false},
      {"scenarios/llama3-70b-whatif-sweep.yaml", false},
      {"scenarios/llama3-8b-straggler-4node-h100.yaml", false},
      {"scenarios/llama3-8b-fsdp-4node-h200.yaml", false},
      {"scenarios/mixtral-8x7b-8node-h100.yaml", true},
      {"scenarios/llama3-405b-2048node-h100.yaml", false},
      {"scenarios/llama3-70b-32node-h100.yaml", false},
      {"scenarios/gpt3-175b-128node-a100.yaml", false},
      {"scenarios/llama3-8b-1node-h100.yaml", true},
      {"scenarios/validation/mcore-h100-1.7B.yaml", false},
      {"scenarios/validation/korthikanti2022-t5-22B-sp-selective.yaml", false}};
  return b;
}

// Prints the campaign's size and the slowest document (a hang shows as a CTest timeout).
struct Clock {
  double slowest_s = 0;
  std::string slowest;
  void time(const std::string& what, const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > slowest_s) {
      slowest_s = dt;
      slowest = what;
    }
  }
};

TEST(Fuzz, MutatedScenariosRunOrFailWithAnInputErrorNamingFileLineAndKey) {
  const std::string src = STEPCAST_SOURCE_DIR;
  const fs::path dir = fuzz::scratch_dir("stepcast_fuzz_test");
  const std::string file = (dir / "mutated.yaml").string();
  std::mt19937 rng = fuzz::rng_for(20261203);
  const int trials = fuzz::trials(16);
  Tally t;
  Clock clock;
  for (const Base& base : bases()) {
    const YAML::Node doc = YAML::LoadFile(src + "/" + base.file);
    for (int trial = 0; trial < trials; ++trial) {
      std::string what;
      std::ofstream(file) << fuzz::emit(fuzz::mutate(doc, rng, what));
      const std::string ctx = fs::path(base.file).filename().string() + ": " + what;
      fuzz::announce(ctx);
      clock.time(ctx, [&] { run_scenario(file, ctx, base.search, 2, rng, t); });
    }
  }
  // Both outcomes occur (the mutations are neither all harmless nor all fatal).
  if (!fuzz::campaign()) {
    EXPECT_GT(t.ran, 60);
    EXPECT_GT(t.refused, 100);
  }
  std::printf("fuzz: %zu bases x %d documents: %d ran, %d refused; slowest %.2f s: %s\n",
              bases().size(), trials, t.ran, t.refused, clock.slowest_s, clock.slowest.c_str());
}

TEST(Fuzz, MutatedProfilesRunOrFailWithAnInputErrorNamingFileLineAndKey) {
  // The same for the hardware profiles: each shipped profile, mutated, is what a scenario
  // of that GPU loads (STEPCAST_PROFILES pointed at a directory holding it).
  const std::string src = STEPCAST_SOURCE_DIR;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"h100-sxm", src + "/tests/data/good/dense_h100.yaml"},
      {"h100-sxm", src + "/tests/data/good/pods_flow_h100.yaml"},
      {"h200-sxm", src + "/tests/data/good/moe_interleaved_h200.yaml"},
      {"a100-80g-sxm", src + "/tests/data/good/partial_node_a100.yaml"}};
  const fs::path dir = fuzz::scratch_dir("stepcast_fuzz_profiles");
  const char* saved = std::getenv("STEPCAST_PROFILES");
  const std::string saved_dir = saved ? saved : "";
  setenv("STEPCAST_PROFILES", dir.c_str(), 1);
  std::mt19937 rng = fuzz::rng_for(31);
  const int trials = fuzz::trials(30);
  Tally t;
  for (const auto& [name, scenario] : cases) {
    const YAML::Node doc = YAML::LoadFile(src + "/hw_profiles/" + name + ".yaml");
    for (int trial = 0; trial < trials; ++trial) {
      std::string what;
      std::ofstream(dir / (name + ".yaml")) << fuzz::emit(fuzz::mutate(doc, rng, what));
      fuzz::announce(name + ": " + what);
      run_scenario(scenario, name + ": " + what, false, 0, rng, t);
    }
  }
  setenv("STEPCAST_PROFILES", saved_dir.c_str(), 1);
  if (!fuzz::campaign()) {
    EXPECT_GT(t.ran, 8);
    EXPECT_GT(t.refused, 50);
  }
  std::printf("fuzz: %zu profiles x %d documents: %d ran, %d refused\n", cases.size(), trials,
              t.ran, t.refused);
}

TEST(Fuzz, MutatedValidationCasesLoadOrFailWithAnInputErrorNamingFileLineAndKey) {
  // `stepcast validate --cases FILE`: a cases file with one case whose scenario is a file
  // (an absolute path) and one given inline, mutated, is loaded (load_cases) and its cases
  // predicted.
  const std::string src = STEPCAST_SOURCE_DIR;
  YAML::Node doc = YAML::Load(R"(
cases:
- id: from-a-file
  source: a paper, a table
  assumed: the microbatch
  scenario: FILE
  measured: {step_time_s: 3.5, memory_peak_gib: 50, tflops_per_gpu_published: 140,
             mfu_published: 0.4, flops_formula: "6*N*D", note: a note}
- id: inline
  source: a paper
  scenario:
    name: inline
    model: {layers: 2, hidden: 1024, ffn_hidden: 2816, heads: 16, vocab: 32000}
    cluster: {profile: h100-sxm, gpus: 2}
    training: {seq_len: 2048, global_batch: 4}
    parallel: {tp: 2}
  measured: {step_time_s: 0.1}
)");
  doc["cases"][0]["scenario"] = src + "/tests/data/good/partial_node_a100.yaml";
  const fs::path dir = fuzz::scratch_dir("stepcast_fuzz_cases");
  const std::string file = (dir / "cases.yaml").string();
  std::mt19937 rng = fuzz::rng_for(4242);
  const int trials = fuzz::trials(60);
  Tally t;
  for (int trial = 0; trial < trials; ++trial) {
    std::string what;
    std::ofstream(file) << fuzz::emit(fuzz::mutate(doc, rng, what));
    fuzz::announce("cases: " + what);
    fuzz::expect_runs_or_refuses([&] { (void)run_cases(load_cases(file), {}); }, "cases: " + what,
                                 t);
  }
  if (!fuzz::campaign()) {
    EXPECT_GT(t.ran, 5);
    EXPECT_GT(t.refused, 20);
  }
  std::printf("fuzz: %d cases files: %d ran, %d refused\n", trials, t.ran, t.refused);
}

}  // namespace
}  // namespace stepcast
