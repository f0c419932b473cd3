// What communication holds besides time: the SMs its kernels take from a GEMM they overlap
// (compute.comm_sms, from the overlap measurements), the GPU memory in use before the
// benchmark (gpu.memory_reserved) and the memory of each NCCL communicator
// (collectives.communicator_memory).
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "calibrate/fit/fit_internal.h"
#include "model/units.h"

namespace stepcast::fit_detail {

void fit_comm_sms(const Measurements& m, const HwProfile& base, FitReport& rep) {
  if (!m.overlap.empty()) {
    const int sms = m.provenance.sm_count > 0 ? m.provenance.sm_count : base.gpu.sms;
    if (sms <= 0) {
      rep.warnings.push_back("overlap: SM count unknown (neither measured nor in the profile)");
    } else {
      for (const MeasuredOverlap& o : m.overlap)
        rep.comm_sms_estimates.push_back(
            std::max(0.0, sms * (1.0 - o.gemm_alone_s / o.gemm_overlapped_s)));
      std::vector<double> v = rep.comm_sms_estimates;
      std::sort(v.begin(), v.end());
      const double med =
          v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
      rep.compute.comm_sms = static_cast<int>(std::lround(med));
      rep.fitted.push_back("compute.comm_sms");
    }
  }
}

void fit_memory_reserved(const Measurements& m, const HwProfile& base, FitReport& rep) {
  if (m.context_memory_bytes) {
    // Whole MiB, rounded up: the reserve is a bound, never below what was measured.
    const double reserve = std::ceil(*m.context_memory_bytes / 1048576.0) * 1048576.0;
    if (reserve < base.gpu.memory_bytes) {
      rep.memory_reserved_bytes = reserve;
      rep.fitted.push_back("gpu.memory_reserved");
    } else {
      rep.warnings.push_back(fmt::format(
          "memory: {} in use before the benchmark is not less than the base profile's {} of "
          "GPU memory; gpu.memory_reserved not written",
          format_bytes(*m.context_memory_bytes), format_bytes(base.gpu.memory_bytes)));
    }
  }
}

void fit_communicator_memory(const Measurements& m, const HwProfile& base, FitReport& rep) {
  if (!m.communicators.empty()) {
    std::vector<CommunicatorMemory>& out = rep.communicator_memory;
    const std::string src = fmt::format("stepcast fit of {}", m.file);
    for (const MeasuredCommunicator& c : m.communicators) {
      const double bytes = std::ceil(c.bytes_per_gpu / 1048576.0) * 1048576.0;
      auto same = std::find_if(out.begin(), out.end(), [&](const CommunicatorMemory& e) {
        return e.ranks == c.ranks && e.nodes == c.nodes;
      });
      if (same == out.end())
        out.push_back({c.ranks, c.nodes, bytes, src});
      else
        same->bytes = std::max(same->bytes, bytes);  // several algorithms: the largest
    }
    for (const CommunicatorMemory& e : base.collectives.communicator_memory)
      if (std::none_of(out.begin(), out.end(), [&](const CommunicatorMemory& x) {
            return x.ranks == e.ranks && x.nodes == e.nodes;
          }))
        out.push_back(e);
    std::sort(out.begin(), out.end(), [](const CommunicatorMemory& a, const CommunicatorMemory& b) {
      return std::tie(a.nodes, a.ranks) < std::tie(b.nodes, b.ranks);
    });
    rep.fitted.push_back("collectives.communicator_memory");
  }
}

}  // namespace stepcast::fit_detail
