// tools/distributed.cc compiled without MPI (this test never defines STEPCAST_WITH_MPI):
// how a launcher's process count is read, and that a build without MPI refuses to run as
// several copies instead of printing N identical searches.
#include "tools/distributed.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "model/error.h"

namespace stepcast {
namespace {

// Sets (or, with nullptr, unsets) the launcher variables for one test.
struct LauncherEnv {
  LauncherEnv(const char* ompi, const char* pmi = nullptr) {
    set("OMPI_COMM_WORLD_SIZE", ompi);
    set("PMI_SIZE", pmi);
    set("PMIX_SIZE", nullptr);
  }
  ~LauncherEnv() {
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
  }
  static void set(const char* k, const char* v) {
    if (v)
      setenv(k, v, 1);
    else
      unsetenv(k);
  }
};

std::string message_of(const InputError& e) {
  return e.issues().empty() ? e.what() : e.issues().front().str();
}

TEST(Distributed, LauncherWorldSizeComesFromTheEnvironment) {
  {
    LauncherEnv env(nullptr);
    EXPECT_EQ(launcher_world_size(), 1);
  }
  {
    LauncherEnv env("4");
    EXPECT_EQ(launcher_world_size(), 4);
  }
  {
    LauncherEnv env(nullptr, "3");  // MPICH / Hydra
    EXPECT_EQ(launcher_world_size(), 3);
  }
  for (const char* bad : {"x", "0", "-2", "4x", "99999999999"}) {
    LauncherEnv env(bad);
    try {
      launcher_world_size();
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(message_of(e).find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << message_of(e);
      EXPECT_NE(message_of(e).find(bad), std::string::npos) << message_of(e);
    }
  }
}

TEST(Distributed, ABuildWithoutMpiRefusesSeveralCopies) {
  ASSERT_FALSE(built_with_mpi());
  {
    LauncherEnv env("1");  // mpirun -np 1: one process, nothing to split
    Distributed d = start_distributed(nullptr, nullptr);
    EXPECT_EQ(d.size, 1);
    EXPECT_EQ(d.rank, 0);
  }
  LauncherEnv env("2");
  try {
    start_distributed(nullptr, nullptr);
    ADD_FAILURE() << "started as 2 copies without MPI";
  } catch (const InputError& e) {
    EXPECT_NE(message_of(e).find("built without MPI"), std::string::npos) << message_of(e);
    EXPECT_NE(message_of(e).find("libopenmpi-dev"), std::string::npos) << message_of(e);
  }
}

TEST(Distributed, OneProcessGathersItsOwnPoints) {
  Distributed d;
  std::vector<ExplorePoint> pts(3);
  pts[1].valid = false;
  pts[2].result.gpus = 7;
  const auto got = gather_points(d, pts);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_FALSE(got[1].valid);
  EXPECT_EQ(got[2].result.gpus, 7);
}

}  // namespace
}  // namespace stepcast
