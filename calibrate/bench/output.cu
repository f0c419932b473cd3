// measurements.json: schema "stepcast.measurements/1" (read by calibrate/fit/measurements.cc).
// Every number's key carries its unit. Layout:
//   {schema, source, subcommands[], provenance{...}, gemm[], memory{kernels[],
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
  if (minor_div == 0) return std::to_string(v / major_div) + "." + std::to_string(v % major_div / 10);
  return std::to_string(v / major_div) + "." + std::to_string(v % major_div / minor_div) + "." +
         std::to_string(v % minor_div);
}


void write_provenance(JsonWriter& w, const Results& r) {
  int devices = 0;
  STEPCAST_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const SoftwareVersions v = software_versions();
  const int driver = v.cuda_driver, runtime = v.cuda_runtime, nccl = v.nccl;

  std::vector<cudaDeviceProp> props(devices);
  for (int d = 0; d < devices; ++d) STEPCAST_CUDA_CHECK(cudaGetDeviceProperties(&props[d], d));

  w.key("provenance");
  w.begin_object();
  w.field("gpu_name", devices > 0 ? std::string(props[0].name) : std::string());
  // Under MPI each process drives one GPU; the GPU list below is this process's node.
  w.field("gpu_count", r.processes > 1 ? r.processes : devices);
  w.field("nodes", r.nodes);
  w.field("cuda_driver_version", version_string(driver, 1000, 0));
  w.field("cuda_runtime_version", version_string(runtime, 1000, 0));
  w.field("nccl_version", nccl >= 10000 ? version_string(nccl, 10000, 100)
                                        : version_string(nccl, 1000, 100));
  w.field("cublaslt_version", v.cublaslt);
  w.field("hostname", v.hostname);
  w.field("date_utc", utc_now());
  w.key("gpus");
  w.begin_array();
  for (int d = 0; d < devices; ++d) {
    int sm_khz = 0, mem_khz = 0;
    STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, d));
    STEPCAST_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, d));
    w.begin_object();
    w.field("index", d);
    w.field("name", std::string(props[d].name));
    w.field("compute_capability", std::to_string(props[d].major) + "." + std::to_string(props[d].minor));
    w.field("sm_count", props[d].multiProcessorCount);
    w.field("memory_bytes", static_cast<double>(props[d].totalGlobalMem));
    w.field("sm_clock_max_mhz", sm_khz / 1000.0);
    w.field("memory_clock_max_mhz", mem_khz / 1000.0);
    w.field("pci_bus_id", props[d].pciBusID);
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

}  // namespace

void write_measurements(const std::string& path, const Options& opt, const Results& r,
                        const std::vector<std::string>& subcommands) {
  std::ofstream f(path);
  if (!f) throw BenchError("cannot write " + path);
  JsonWriter w(f);
  w.begin_object();
  w.field("schema", kMeasurementsSchema);
  w.field("source", opt.source.empty() ? std::string("stepcast-bench") : opt.source);
  w.key("subcommands");
  w.begin_array();
  for (const auto& s : subcommands) w.value(s);
  w.end_array();
  write_provenance(w, r);

  w.key("gemm");
  w.begin_array();
  for (const GemmResult& g : r.gemm) {
    w.begin_object();
    w.field("m", g.shape.m);
    w.field("n", g.shape.n);
    w.field("k", g.shape.k);
    w.field("batch", g.shape.batch);
    w.field("dtype", g.shape.dtype);
    w.field("layout", g.layout);
    w.field("origin", g.shape.origin);
    w.field("time_us", g.time_us);
    w.field("flop_per_s", g.flop_per_s);
    w.field("repeats", g.repeats);
    w.end_object();
  }
  w.end_array();

  w.key("memory");
  w.begin_object();
  w.key("kernels");
  w.begin_array();
  for (const MemoryResult& m : r.memory) {
    w.begin_object();
    w.field("kernel", m.kernel);
    w.field("bytes_read", m.bytes_read);
    w.field("bytes_written", m.bytes_written);
    w.field("time_us", m.time_us);
    w.field("bytes_per_s", m.bytes_per_s);
    w.end_object();
  }
  w.end_array();
  if (r.launch_overhead_us >= 0) w.field("launch_overhead_us", r.launch_overhead_us);
  if (r.context_memory_bytes >= 0) w.field("context_memory_bytes", r.context_memory_bytes);
  w.end_object();

  w.key("collectives");
  w.begin_array();
  for (const CollectiveResult& c : r.collectives) {
    w.begin_object();
    w.field("op", c.op);
    w.field("ranks", c.ranks);
    w.field("nodes", c.nodes);
    w.field("algo", c.algo);
    w.field("dtype", c.dtype);
    w.field("size_bytes", c.size_bytes);
    w.field("time_us", c.time_us);
    w.field("algbw_GBps", c.algbw_GBps);
    w.field("busbw_GBps", c.busbw_GBps);
    w.end_object();
  }
  w.end_array();

  w.key("communicators");
  w.begin_array();
  for (const CommunicatorResult& c : r.communicators) {
    w.begin_object();
    w.field("ranks", c.ranks);
    w.field("nodes", c.nodes);
    w.field("algo", c.algo);
    w.field("memory_bytes_per_gpu", c.bytes_per_gpu);
    w.end_object();
  }
  w.end_array();

  w.key("overlap");
  w.begin_array();
  for (const OverlapResult& o : r.overlap) {
    w.begin_object();
    w.field("m", o.gemm.m);
    w.field("n", o.gemm.n);
    w.field("k", o.gemm.k);
    w.field("dtype", o.gemm.dtype);
    w.field("ranks", o.ranks);
    w.field("allreduce_size_bytes", o.allreduce_size_bytes);
    w.field("allreduce_alone_time_us", o.allreduce_alone_time_us);
    w.field("gemm_alone_time_us", o.gemm_alone_time_us);
    w.field("gemm_overlapped_time_us", o.gemm_overlapped_time_us);
    w.end_object();
  }
  w.end_array();

  w.key("notes");
  w.begin_array();
  for (const auto& n : r.notes) w.value(n);
  w.end_array();
  w.end_object();
  if (!f) throw BenchError("error writing " + path);
}

}  // namespace stepcast::bench
