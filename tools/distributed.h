// Sweep and search split across MPI ranks (docs/usage.md, "Several processes (MPI)"):
//   mpirun -np N tools/stepcast search SCENARIO ...
// Every rank enumerates the same candidates; rank r evaluates those with index i % N == r
// (on its own --threads), rank 0 gathers the points in candidate order and prints exactly
// what one process prints. MPI starts only when mpirun/mpiexec launched more than one
// process; a stepcast built without MPI refuses such a launch instead of running N copies.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/report/explore.h"

namespace stepcast {

struct Distributed {
  int rank = 0;
  int size = 1;
  bool started = false;  // MPI_Init was called (stop_distributed finalizes)
};

// The process count a launcher announced in the environment (Open MPI, MPICH/Hydra, PMI,
// PMIx), 1 when none did. Throws InputError when a value is not a positive integer.
int launcher_world_size();

// Starts MPI when launcher_world_size() > 1. Throws InputError (exit 2) when this stepcast
// was built without MPI and a launcher started several copies.
Distributed start_distributed(int* argc, char*** argv);
void stop_distributed(Distributed& d);

// Rank 0 returns every rank's points in candidate order: `local` has one entry per
// candidate, of which rank r evaluated those with i % size == r. The other ranks return
// nothing.
std::vector<ExplorePoint> gather_points(const Distributed& d, std::vector<ExplorePoint> local);

// Rank 0's `value` on every rank (search's pruning threshold, computed from the points
// only rank 0 holds). `value` itself with one process.
double broadcast_from_rank0(const Distributed& d, double value);

// Ends every rank with `code` (one failing rank must not leave the others waiting).
[[noreturn]] void abort_distributed(const Distributed& d, int code);

// Whether this build can split work across MPI ranks.
bool built_with_mpi();

}  // namespace stepcast
