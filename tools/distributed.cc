#include "tools/distributed.h"

#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "model/error.h"

#ifdef STEPCAST_WITH_MPI
#include <mpi.h>
#endif

namespace stepcast {

int launcher_world_size() {
  // Open MPI's mpirun, MPICH/Hydra (and Intel MPI) or srun with PMI, PMIx launchers. (Not
  // SLURM_NTASKS: a batch script sees it without being one of several launched copies.)
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > std::numeric_limits<int>::max()) {
      throw InputError(InputIssue{"", 0, 0, var,
                                  fmt::format("expected a positive process count, got \"{}\"", v)});
    }
    return static_cast<int>(n);
  }
  return 1;
}

bool built_with_mpi() {
#ifdef STEPCAST_WITH_MPI
  return true;
#else
  return false;
#endif
}

#ifdef STEPCAST_WITH_MPI

namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw InvariantError(fmt::format("{} failed (MPI error {})", what, rc));
}

}  // namespace

Distributed start_distributed(int* argc, char*** argv) {
  Distributed d;
  if (launcher_world_size() <= 1) return d;
  check(MPI_Init(argc, argv), "MPI_Init");
  d.started = true;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &d.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &d.size), "MPI_Comm_size");
  return d;
}

void stop_distributed(Distributed& d) {
  if (d.started) MPI_Finalize();
  d.started = false;
}

std::vector<ExplorePoint> gather_points(const Distributed& d, std::vector<ExplorePoint> local) {
  if (d.size <= 1) return local;
  const size_t total = local.size(), size = static_cast<size_t>(d.size);
  std::vector<const ExplorePoint*> mine;
  for (size_t i = static_cast<size_t>(d.rank); i < total; i += size) mine.push_back(&local[i]);
  const std::vector<std::uint8_t> bytes = points_to_cbor(mine);
  STEPCAST_CHECK(bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()),
                 "gather_points: a rank's points exceed 2 GiB");
  const int len = static_cast<int>(bytes.size());
  std::vector<int> lens(d.rank == 0 ? size : 0), displs(lens.size());
  check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  size_t sum = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    STEPCAST_CHECK(sum <= static_cast<size_t>(std::numeric_limits<int>::max()),
                   "gather_points: the points of all ranks exceed 2 GiB");
    displs[r] = static_cast<int>(sum);
    sum += static_cast<size_t>(lens[r]);
  }
  std::vector<std::uint8_t> all(sum);
  check(MPI_Gatherv(bytes.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE,
                    0, MPI_COMM_WORLD),
        "MPI_Gatherv");
  if (d.rank != 0) return {};
  std::vector<ExplorePoint> out(total);
  for (size_t r = 0; r < size; ++r) {
    const auto first = all.begin() + displs[r];
    std::vector<ExplorePoint> pts =
        points_from_cbor(std::vector<std::uint8_t>(first, first + lens[r]));
    size_t i = r;
    for (auto& p : pts) {
      STEPCAST_CHECK(i < total, fmt::format("gather_points: rank {} sent too many points", r));
      out[i] = std::move(p);
      i += size;
    }
    STEPCAST_CHECK(i >= total, fmt::format("gather_points: rank {} sent too few points", r));
  }
  return out;
}

double broadcast_from_rank0(const Distributed& d, double value) {
  if (d.size <= 1) return value;
  check(MPI_Bcast(&value, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return value;
}

void abort_distributed(const Distributed& d, int code) {
  if (d.started) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

#else  // built without MPI

Distributed start_distributed(int*, char***) {
  const int n = launcher_world_size();
  if (n > 1) {
    throw InputError(InputIssue{
        "", 0, 0, "mpirun",
        fmt::format("started as {} processes, but this stepcast was built without MPI: each would "
                    "run the whole job. Install Open MPI (apt-get install libopenmpi-dev) and "
                    "rebuild, or run without mpirun",
                    n)});
  }
  return {};
}

void stop_distributed(Distributed&) {}

std::vector<ExplorePoint> gather_points(const Distributed&, std::vector<ExplorePoint> local) {
  return local;
}

double broadcast_from_rank0(const Distributed&, double value) { return value; }

void abort_distributed(const Distributed&, int code) { std::exit(code); }

#endif

}  // namespace stepcast
