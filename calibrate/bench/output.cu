// measurements.json: schema "stepcast.measurements/1" (read by calibrate/fit/measurements.cc).
// Every number's key carries its unit. Layout:
//   {schema, source, subcommands[], provenance{...}, gemm[], grouped_gemm[], memory{kernels[],
//    launch_overhead_us, context_memory_bytes}, collectives[], communicators[], overlap[],
//    notes[]}
#include <algorithm>
#include <fstream>

#include "bench.h"
#include "check.h"
#include "json_io.h"

namespace stepcast::bench {

double median(std::vector<double> v) {
  if (v.empty()) throw BenchError("median of no samples");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

std::string version_string(int v, int major_div, int minor_div) {
  // CUDA: 12040 -> "12.4"; NCCL: 22602 -> "2.26.2".
  if (minor_div == 0)
    return std::to_string(v / major_div) + "." + std::to_string(v % major_div / 10);
  return std::to_string(v / major_div) + "." + std::to_string(v % major_div / minor_div) + "." +
         std::to_string(v % minor_div);
}

Json provenance(const Results& r) {
  int devices = 0;
  STEPCAST_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const SoftwareVersions v = software_versions();
  const int driver = v.cuda_driver, runtime = v.cuda_runtime, nccl = v.nccl;

  std::vector<cudaDeviceProp> props(devices);
  for (int d = 0; d < devices; ++d) STEPCAST_CUDA_CHECK(cudaGetDeviceProperties(&props[d], d));

  Json w;
  w["gpu_name"] = devices > 0 ? std::string(props[0].name) : std::string();
  // Under MPI each process drives one GPU; the GPU list below is this process's node.
  w["gpu_count"] = r.processes > 1 ? r.processes : devices;
  w["nodes"] = r.nodes;
  w["cuda_driver_version"] = version_string(driver, 1000, 0);
  w["cuda_runtime_version"] = version_string(runtime, 1000, 0);
  w["nccl_version"] =
      nccl >= 10000 ? version_string(nccl, 10000, 100) : version_string(nccl, 1000, 100);
  w["cublaslt_version"] = v.cublaslt;
  w["hostname"] = v.hostname;
  w["date_utc"] = utc_now();
  Json& gpus = w["gpus"] = Json::array();
  for (int d = 0; d < devices; ++d) {
    int sm_khz = 0, mem_khz = 0;
    STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, d));
    STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, d));
    Json g;
    g["index"] = d;
    g["name"] = std::string(props[d].name);
    g["compute_capability"] = std::to_string(props[d].major) + "." + std::to_string(props[d].minor);
    g["sm_count"] = props[d].multiProcessorCount;
    g["memory_bytes"] = static_cast<double>(props[d].totalGlobalMem);
    g["sm_clock_max_mhz"] = sm_khz / 1000.0;
    g["memory_clock_max_mhz"] = mem_khz / 1000.0;
    g["pci_bus_id"] = props[d].pciBusID;
    gpus.push_back(std::move(g));
  }
  return w;
}

// The "gemm" entries, or with `grouped` the "grouped_gemm" ones (batch as groups, with the
// phase and the streams).
Json gemm_json(const std::vector<GemmResult>& gemm, bool grouped) {
  Json out = Json::array();
  for (const GemmResult& g : gemm) {
    Json o;
    o["m"] = g.shape.m;
    o["n"] = g.shape.n;
    o["k"] = g.shape.k;
    o[grouped ? "groups" : "batch"] = g.shape.batch;
    o["dtype"] = g.shape.dtype;
    if (grouped) o["phase"] = g.shape.phase;
    o["layout"] = g.layout;
    if (grouped) o["streams"] = g.streams;
    o["origin"] = g.shape.origin;
    o["time_us"] = g.time_us;
    o["flop_per_s"] = g.flop_per_s;
    o["repeats"] = g.repeats;
    out.push_back(std::move(o));
  }
  return out;
}

Json memory_json(const Results& r) {
  Json out;
  Json& kernels = out["kernels"] = Json::array();
  for (const MemoryResult& m : r.memory) {
    Json o;
    o["kernel"] = m.kernel;
    o["bytes_read"] = m.bytes_read;
    o["bytes_written"] = m.bytes_written;
    o["time_us"] = m.time_us;
    o["bytes_per_s"] = m.bytes_per_s;
    kernels.push_back(std::move(o));
  }
  if (r.launch_overhead_us >= 0) out["launch_overhead_us"] = r.launch_overhead_us;
  if (r.context_memory_bytes >= 0) out["context_memory_bytes"] = r.context_memory_bytes;
  return out;
}

Json collectives_json(const std::vector<CollectiveResult>& collectives) {
  Json out = Json::array();
  for (const CollectiveResult& c : collectives) {
    Json o;
    o["op"] = c.op;
    o["ranks"] = c.ranks;
    o["nodes"] = c.nodes;
    o["algo"] = c.algo;
    o["dtype"] = c.dtype;
    o["size_bytes"] = c.size_bytes;
    o["time_us"] = c.time_us;
    o["algbw_GBps"] = c.algbw_GBps;
    o["busbw_GBps"] = c.busbw_GBps;
    out.push_back(std::move(o));
  }
  return out;
}

Json communicators_json(const std::vector<CommunicatorResult>& communicators) {
  Json out = Json::array();
  for (const CommunicatorResult& c : communicators) {
    Json o;
    o["ranks"] = c.ranks;
    o["nodes"] = c.nodes;
    o["algo"] = c.algo;
    o["memory_bytes_per_gpu"] = c.bytes_per_gpu;
    out.push_back(std::move(o));
  }
  return out;
}

Json overlap_json(const std::vector<OverlapResult>& overlap) {
  Json out = Json::array();
  for (const OverlapResult& o : overlap) {
    Json j;
    j["m"] = o.gemm.m;
    j["n"] = o.gemm.n;
    j["k"] = o.gemm.k;
    j["dtype"] = o.gemm.dtype;
    j["ranks"] = o.ranks;
    j["allreduce_size_bytes"] = o.allreduce_size_bytes;
    j["allreduce_alone_time_us"] = o.allreduce_alone_time_us;
    j["gemm_alone_time_us"] = o.gemm_alone_time_us;
    j["gemm_overlapped_time_us"] = o.gemm_overlapped_time_us;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

void write_measurements(const std::string& path, const Options& opt, const Results& r,
                        const std::vector<std::string>& subcommands) {
  std::ofstream f(path);
  if (!f) throw BenchError("cannot write " + path);
  Json doc;
  doc["schema"] = kMeasurementsSchema;
  doc["source"] = opt.source.empty() ? std::string("stepcast-bench") : opt.source;
  doc["subcommands"] = subcommands;
  doc["provenance"] = provenance(r);
  doc["gemm"] = gemm_json(r.gemm, false);
  doc["grouped_gemm"] = gemm_json(r.grouped_gemm, true);
  doc["memory"] = memory_json(r);
  doc["collectives"] = collectives_json(r.collectives);
  doc["communicators"] = communicators_json(r.communicators);
  doc["overlap"] = overlap_json(r.overlap);
  doc["notes"] = r.notes;
  write_json(f, doc);
  if (!f) throw BenchError("error writing " + path);
}

}  // namespace stepcast::bench
