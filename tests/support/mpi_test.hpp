// Support for multi-rank GoogleTest binaries run under mpirun.
//
// - Only rank 0 prints GoogleTest's output; every rank's failure messages are gathered and
//   reported by rank 0 after each test, prefixed with the rank, and the test fails everywhere
//   if it failed anywhere (MpiTest::TearDown).
// - A watchdog aborts the whole job if one test runs longer than FLUXCPP_TEST_WATCHDOG_S
//   (default 240 s): a hang fails, it never stalls the suite.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "fluxcpp/context_mpi.hpp"  // the tests make their contexts from MPI_COMM_WORLD

namespace fluxcpp::test {

int world_rank();
int world_size();

// ranks_per_node for the test's contexts: FLUXCPP_TEST_RANKS_PER_NODE (0: detect hosts).
int test_ranks_per_host();

// Options used by most tests: the forced layout, a short timeout.
ContextOptions test_options(double timeout_s = 20.0);

// test_options() with compute_threads compute threads (GEMM workers, cast threads).
ContextOptions threaded_options(int compute_threads);

class MpiTest : public ::testing::Test {
 protected:
  void TearDown() override;
};

// True if any rank passes true.
bool any_rank(bool v);

// Segments whose name contains "fluxcpp" currently in /dev/shm (for leak checks). own_only:
// only those this process created (names carry the creator's pid), so that other jobs running
// at the same time cannot make a check fail, nor names another live process took for this pid
// (a name squatter) that this process does not have open.
std::vector<std::string> fluxcpp_shm_entries(bool own_only = false);

}  // namespace fluxcpp::test
