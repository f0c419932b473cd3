// The one error type of the GPU benchmarks: main() prints it and exits 1.
#pragma once

#include <stdexcept>
#include <string>

namespace stepcast::bench {

class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void call_failed(const char* file, int line, const char* call,
                                     const std::string& what) {
  throw BenchError(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + what);
}

}  // namespace stepcast::bench
