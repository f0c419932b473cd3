// Helpers of the end-to-end tests of tools/stepcast's binary (cli_helpers.h).
#include "cli_helpers.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace cli_test {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path tmpdir() {
  static int n = 0;
  fs::path d = fs::temp_directory_path() /
               ("stepcast-cli-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::create_directories(d);
  return d;
}

CliRun stepcast(const std::string& args) {
  fs::path d = tmpdir();
  std::string cmd = std::string(STEPCAST_BINARY_DIR) + "/stepcast " + args + " >" +
                    (d / "out").string() + " 2>" + (d / "err").string();
  int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(d / "out");
  r.err = slurp(d / "err");
  return r;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace cli_test
