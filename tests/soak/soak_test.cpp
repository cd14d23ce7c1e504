// Soak (label "soak", not in the default run: ctest --test-dir build -L soak): 10,000 calls of
// all_gather, ag_gemm, gemm_rs and all_to_all_single, with a bad call (kInvalidArgument) every
// 50 calls, every op destroyed and created again every 250 calls and the context every 2,500.
// Between contexts (no fluxcpp object alive) the process must hold exactly the file descriptors,
// threads and memory mappings it held after a warm-up round, and its resident set may not grow
// by more than a little allocator slack. all_gather's output is checked exactly on every call.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"

namespace fluxcpp::test {
namespace {

int count_dir(const char* path) {
  DIR* d = opendir(path);
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - (std::strcmp(path, "/proc/self/fd") == 0 ? 1 : 0);  // the DIR's own fd
}

struct Usage {
  int fds = 0, threads = 0, maps = 0;
  long rss_kib = 0;
};

Usage usage() {
  Usage u;
  u.fds = count_dir("/proc/self/fd");
  u.threads = count_dir("/proc/self/task");
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++u.maps;
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  u.rss_kib = resident * (sysconf(_SC_PAGESIZE) / 1024);
  return u;
}

constexpr int64_t kRows = 8, kK = 32, kN = 32;

// One context's worth of calls.
void run_calls(int calls, int first_call) {
  Context ctx(MPI_COMM_WORLD, test_options(30.0));
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t m = kRows * W;
  auto make_ag = [&] { return std::make_unique<AllGather>(ctx, AllGatherOptions{m, kK}); };
  auto make_agg = [&] { return std::make_unique<AgGemm>(ctx, AgGemmOptions{m, kN, kK}); };
  auto make_rs = [&] { return std::make_unique<GemmRs>(ctx, GemmRsOptions{m, kN, kK}); };
  auto make_a2a = [&] {
    return std::make_unique<AllToAllSingle>(ctx, AllToAllSingleOptions{m, kK});
  };
  auto ag = make_ag();
  auto agg = make_agg();
  auto rs = make_rs();
  auto a2a = make_a2a();
  std::vector<float> in(m * kK), w(kN * kK, 0.5f), out(m * kN * W), gathered(m * kK);
  std::vector<int64_t> splits(W, kRows);
  for (int i = 0; i < calls; ++i) {
    const int call = first_call + i;
    if (i > 0 && i % 250 == 0) {  // every op in turn is destroyed and created again
      switch ((i / 250) % 4) {
        case 0: ag = make_ag(); break;
        case 1: agg = make_agg(); break;
        case 2: rs = make_rs(); break;
        default: a2a = make_a2a(); break;
      }
    }
    if (call % 50 == 49) {  // a bad call: rejected on every rank, nothing breaks
      try {
        ag->forward(in.data(), m + 1, gathered.data());
        ADD_FAILURE() << "call " << call << ": bad m accepted";
      } catch (const Error& e) {
        ASSERT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
      }
      continue;
    }
    switch (call % 4) {
      case 0: {
        for (int64_t j = 0; j < kRows * kK; ++j)
          in[j] = static_cast<float>(r * 1000 + call % 97 + j);
        ag->forward(in.data(), m, gathered.data());
        for (int q = 0; q < W; ++q)
          for (int64_t j = 0; j < kRows * kK; ++j)
            if (gathered[q * kRows * kK + j] != static_cast<float>(q * 1000 + call % 97 + j)) {
              FAIL() << "call " << call << ": all_gather row of rank " << q << " wrong";
            }
        break;
      }
      case 1: agg->forward(in.data(), m, w.data(), nullptr, out.data(), nullptr); break;
      case 2: rs->forward(in.data(), m, w.data(), nullptr, out.data()); break;
      default: a2a->forward(in.data(), splits.data(), gathered.data(), splits.data()); break;
    }
  }
  a2a.reset();
  rs.reset();
  agg.reset();
  ag.reset();
  ctx.close();
}

class Soak : public MpiTest {};

TEST_F(Soak, TenThousandCallsHoldNoGrowingResource) {
  run_calls(500, 0);  // warm-up: lazy MPI and allocator state
  const Usage base = usage();
  constexpr int kContexts = 4, kCalls = 2500;
  for (int e = 0; e < kContexts; ++e) {
    run_calls(kCalls, 500 + e * kCalls);
    const Usage u = usage();
    if (world_rank() == 0)
      std::printf(
          "soak: after %d calls: fds %d, threads %d, mappings %d, rss %ld KiB (base %d, "
          "%d, %d, %ld KiB)\n",
          (e + 1) * kCalls, u.fds, u.threads, u.maps, u.rss_kib, base.fds, base.threads, base.maps,
          base.rss_kib);
    EXPECT_EQ(u.fds, base.fds) << "rank " << world_rank() << " after context " << e;
    EXPECT_EQ(u.threads, base.threads) << "rank " << world_rank() << " after context " << e;
    EXPECT_LE(u.maps, base.maps) << "rank " << world_rank() << " after context " << e;
    EXPECT_LE(u.rss_kib, base.rss_kib + 4096) << "rank " << world_rank() << " after context " << e;
  }
  EXPECT_TRUE(fluxcpp_shm_entries(/*own_only=*/true).empty());
}

}  // namespace
}  // namespace fluxcpp::test
