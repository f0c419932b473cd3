// Provenance shared by stepcast-bench and stepcast-exec (bench.h: SoftwareVersions).
#include <chrono>
#include <ctime>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include "bench.h"
#include "check.h"

namespace stepcast::bench {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

SoftwareVersions software_versions() {
  SoftwareVersions v;
  STEPCAST_CUDA_CHECK(cudaDriverGetVersion(&v.cuda_driver));
  STEPCAST_CUDA_CHECK(cudaRuntimeGetVersion(&v.cuda_runtime));
  STEPCAST_NCCL_CHECK(ncclGetVersion(&v.nccl));
  v.cublaslt = static_cast<std::int64_t>(cublasLtGetVersion());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  v.hostname = host;
  return v;
}

}  // namespace stepcast::bench
