// Helpers of the end-to-end tests of tools/stepcast's binary (cli_run_test.cc,
// cli_compare_test.cc): run it as a user would, temporary folders, files, small scenarios.
#pragma once

#include <filesystem>
#include <string>

namespace cli_test {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p);
// A fresh folder under the system's temporary directory (one per call).
fs::path tmpdir();
// Runs build/stepcast with `args` (a shell command line), capturing stdout and stderr.
CliRun stepcast(const std::string& args);
void write(const fs::path& p, const std::string& text);

inline const std::string kSrc = STEPCAST_SOURCE_DIR;
inline const std::string kDefault = kSrc + "/scenarios/llama3-8b-1node-h100.yaml";

// A small scenario that runs in milliseconds.
inline const char* kSmall = R"(name: small
model: llama3-8b
cluster: {profile: h100-sxm, nodes: 1}
training: {seq_len: 2048, global_batch: 16, dtype: bf16, optimizer: adam}
parallel: {tp: 2, pp: 2, microbatch: 1, schedule: 1f1b, zero: 1, sequence_parallel: true,
           recompute: selective}
)";

}  // namespace cli_test
