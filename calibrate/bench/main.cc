// stepcast-bench: GPU microbenchmarks -> measurements.json (docs/usage.md).
//   stepcast-bench gemm|memory|nccl|overlap|all [more subcommands] [options] -o FILE
// Exit codes: 0 success, 1 CUDA/NCCL/internal failure, 2 bad arguments.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_error.h"

#ifdef STEPCAST_BENCH_WITH_MPI
#include <mpi.h>
#endif

namespace {

using namespace stepcast::bench;

const char* kUsage = R"(usage: stepcast-bench SUBCOMMAND... [options] -o measurements.json
subcommands (several may be given; all = every one):
  gemm      cuBLASLt GEMM bf16/fp16/fp8 over a shape grid (+ --program shapes), and
            grouped MoE expert GEMMs as Transformer Engine runs them (one GEMM per
            expert over 4 streams) over current models' expert shapes (+ the
            Program's batch > 1 GEMMs)
  memory    HBM bandwidth (copy, Adam-like update) and kernel launch overhead
  nccl      allreduce, reduce_scatter, allgather, all_to_all, broadcast, send_recv
            over sizes and 2/4/8-GPU groups (or MPI: one GPU per node, all GPUs)
  overlap   GEMM alone vs GEMM with a concurrent allreduce (SM interference)
options:
  -o, --output FILE     measurements file to write (required)
  --quick               shorter sweep (a few minutes on one node)
  --warmup N            untimed launches before timing (default 5)
  --repeats N           timed launches, median kept (default 20)
  --dtypes LIST         GEMM dtypes, comma separated (default bf16,fp16,fp8)
  --dims LIST           GEMM grid sizes for m, n and k (default 256,...,16384)
  --program FILE        also time the GEMM shapes of a Program (stepcast lower)
  --grouped-grid G      grouped GEMM grid: full, quick or none (default full,
                        quick with --quick); a Program's grouped GEMMs always run
  --min-bytes N         smallest collective size S in bytes (default 1024)
  --max-bytes N         largest collective size S in bytes (default 4294967296)
  --factor F            size step (default 2)
  --gpus LIST           single-process group sizes (default 2,4,8)
  --ops LIST            collectives (default: all six)
  --algo NAME           pin NCCL_ALGO (ring, tree, nvls, ...); recorded per entry
  --device N            GPU for single-GPU benchmarks (default 0)
  --source TEXT         free text stored in the file's "source" field
)";

struct UsageError {
  std::string what;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double number(const std::string& flag, const std::string& v, double min) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= min))
    throw UsageError{flag + ": expected a number >= " + std::to_string(min) + ", got \"" + v +
                     "\""};
  return d;
}

int integer(const std::string& flag, const std::string& v, int min) {
  const double d = number(flag, v, min);
  if (d != static_cast<int>(d)) throw UsageError{flag + ": expected an integer, got \"" + v + "\""};
  return static_cast<int>(d);
}

// Reads the command line into `opt`, `subcommands` and `output` (UsageError when wrong);
// false after printing the help (-h).
bool parse_args(int argc, char** argv, Options& opt, std::vector<std::string>& subcommands,
                std::string& output) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError{a + ": missing value"};
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return false;
    } else if (a == "gemm" || a == "memory" || a == "nccl" || a == "overlap") {
      subcommands.push_back(a);
    } else if (a == "all") {
      subcommands.insert(subcommands.end(), {"gemm", "memory", "nccl", "overlap"});
    } else if (a == "-o" || a == "--output") {
      output = next();
    } else if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--warmup") {
      opt.warmup = integer(a, next(), 0);
    } else if (a == "--repeats") {
      opt.repeats = integer(a, next(), 1);
    } else if (a == "--dtypes") {
      opt.dtypes = split(next());
      for (const auto& d : opt.dtypes)
        if (d != "bf16" && d != "fp16" && d != "fp8")
          throw UsageError{"--dtypes: unknown dtype \"" + d + "\" (bf16, fp16, fp8)"};
    } else if (a == "--dims") {
      opt.gemm_dims.clear();
      for (const auto& d : split(next())) opt.gemm_dims.push_back(integer(a, d, 1));
    } else if (a == "--program") {
      opt.program_file = next();
    } else if (a == "--grouped-grid") {
      opt.grouped_grid = next();
      if (opt.grouped_grid != "full" && opt.grouped_grid != "quick" && opt.grouped_grid != "none")
        throw UsageError{"--grouped-grid: expected full, quick or none, got \"" + opt.grouped_grid +
                         "\""};
    } else if (a == "--min-bytes") {
      opt.min_bytes = number(a, next(), 4);
    } else if (a == "--max-bytes") {
      opt.max_bytes = number(a, next(), 4);
    } else if (a == "--factor") {
      opt.size_factor = number(a, next(), 1.01);
    } else if (a == "--gpus") {
      opt.group_sizes.clear();
      for (const auto& g : split(next())) opt.group_sizes.push_back(integer(a, g, 2));
    } else if (a == "--ops") {
      opt.ops = split(next());
      for (const auto& op : opt.ops) busbw_factor(op, 2);  // validates the name
    } else if (a == "--algo") {
      opt.algo = next();
    } else if (a == "--device") {
      opt.device = integer(a, next(), 0);
    } else if (a == "--source") {
      opt.source = next();
    } else {
      throw UsageError{"unknown argument \"" + a + "\""};
    }
  }
  if (subcommands.empty()) throw UsageError{"no subcommand given"};
  if (output.empty()) throw UsageError{"-o FILE is required"};
  if (opt.max_bytes < opt.min_bytes) throw UsageError{"--max-bytes is below --min-bytes"};
  return true;
}

// Whether this process writes the measurements (world rank 0); under MPI also the process
// and node counts.
bool count_processes([[maybe_unused]] Results& results) {
  bool root = true;
#ifdef STEPCAST_BENCH_WITH_MPI
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  root = rank == 0;
  results.processes = world;
  if (world > 1) {
    // Node count: processes that are rank 0 on their shared-memory node.
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    int local_rank = 0;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    int is_root = local_rank == 0 ? 1 : 0;
    MPI_Allreduce(&is_root, &results.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  }
#endif
  return root;
}

// Runs the subcommands in order and, on the root process, writes `output`.
void run_benchmarks(const Options& opt, const std::vector<std::string>& subcommands,
                    const std::string& output) {
  Results results;
  const bool root = count_processes(results);
  for (const std::string& s : subcommands) {
    // Single-GPU benchmarks run on world rank 0 only; nccl runs everywhere.
    if (s == "nccl")
      run_nccl(opt, results);
    else if (!root)
      continue;
    else if (s == "gemm")
      run_gemm(opt, results);
    else if (s == "memory")
      run_memory(opt, results);
    else if (s == "overlap" && results.processes == 1)
      run_overlap(opt, results);
  }
  if (root) {
    write_measurements(output, opt, results, subcommands);
    std::cerr << "stepcast-bench: wrote " << output << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
#ifdef STEPCAST_BENCH_WITH_MPI
  MPI_Init(&argc, &argv);
#endif
  Options opt;
  std::vector<std::string> subcommands;
  std::string output;
  int rc = 0;
  try {
    if (!parse_args(argc, argv, opt, subcommands, output)) return 0;
  } catch (const UsageError& e) {
    std::cerr << "stepcast-bench: " << e.what << "\n" << kUsage;
    rc = 2;
  } catch (const BenchError& e) {
    std::cerr << "stepcast-bench: " << e.what() << "\n";
    rc = 2;
  }

  if (rc == 0) {
    try {
      run_benchmarks(opt, subcommands, output);
    } catch (const std::exception& e) {
      std::cerr << "stepcast-bench: " << e.what() << "\n";
      rc = 1;
#ifdef STEPCAST_BENCH_WITH_MPI
      MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    }
  }
#ifdef STEPCAST_BENCH_WITH_MPI
  MPI_Finalize();
#endif
  return rc;
}
