// Context: layout detection, forced hosts, options, timeouts, the thread-level rule and the
// launch guard.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "comm/config.hpp"
#include "comm/context_impl.hpp"
#include "comm/mpi_util.hpp"
#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "shm/signal.hpp"

namespace fluxcpp::test {
namespace {

class ContextTest : public MpiTest {};

TEST_F(ContextTest, LayoutMatchesWorld) {
  Context ctx(MPI_COMM_WORLD, test_options());
  EXPECT_EQ(ctx.rank(), world_rank());
  EXPECT_EQ(ctx.world_size(), world_size());
  const int rpn = test_ranks_per_host();
  if (rpn > 0) {
    EXPECT_EQ(ctx.host_id(), world_rank() / rpn);
    EXPECT_EQ(ctx.host_rank(), world_rank() % rpn);
    EXPECT_EQ(ctx.num_hosts(), (world_size() + rpn - 1) / rpn);
    int expect_size = std::min(rpn, world_size() - ctx.host_id() * rpn);
    EXPECT_EQ(ctx.host_size(), expect_size);
  } else {
    // Every rank of a test run shares this machine.
    EXPECT_EQ(ctx.num_hosts(), 1);
    EXPECT_EQ(ctx.host_size(), world_size());
    EXPECT_EQ(ctx.host_rank(), world_rank());
  }
  ctx.close();
  ctx.close();  // idempotent
}

TEST_F(ContextTest, SubCommunicator) {
  // Contexts on a split communicator are independent of the world one.
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half);
  {
    ContextOptions o;
    o.timeout_s = 10;
    Context a(half, o);
    Context b(MPI_COMM_WORLD, o);
    int hs = 0;
    MPI_Comm_size(half, &hs);
    EXPECT_EQ(a.world_size(), hs);
    EXPECT_EQ(b.world_size(), world_size());
  }
  MPI_Comm_free(&half);
}

template <typename F>
void expect_code(F&& fn, Errc code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "rank " << world_rank() << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(ContextTest, BadOptionsFailOnEveryRank) {
  const int r = world_rank();
  ContextOptions o = test_options();
  o.ranks_per_host = r == 0 ? -1 : 1;
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "ranks_per_host");
  if (world_size() > 1) {
    o.ranks_per_host = r == 0 ? 1 : 2;
    expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "disagree");
  }
  o = test_options();
  o.timeout_s = r == world_size() - 1 ? -3.0 : 1.0;
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "timeout_s");
}

// ranks_per_node, the former name of ranks_per_host, still groups the hosts; both names with
// different values fail on every rank naming both.
TEST_F(ContextTest, FormerGroupingNameStillWorks) {
  const ContextOptions now = test_options();
  ContextOptions former = now;
  former.ranks_per_host = 0;
  former.ranks_per_node = now.ranks_per_host;
  {
    Context a(MPI_COMM_WORLD, now), b(MPI_COMM_WORLD, former);
    EXPECT_EQ(b.num_hosts(), a.num_hosts());
    EXPECT_EQ(b.host_id(), a.host_id());
    EXPECT_EQ(b.host_rank(), a.host_rank());
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    EXPECT_EQ(b.node_rank(), a.host_rank());  // the former accessors
    EXPECT_EQ(b.num_nodes(), a.num_hosts());
#pragma GCC diagnostic pop
  }
  ContextOptions both = now;
  both.ranks_per_host = 1;
  both.ranks_per_node = 2;
  expect_code([&] { Context c(MPI_COMM_WORLD, both); }, Errc::kInvalidArgument,
              "ranks_per_host=1 and ranks_per_node=2");
}

TEST_F(ContextTest, BadEnvironmentFailsOnEveryRank) {
  if (world_rank() == 0) setenv("FLUXCPP_BIND", "sideways", 1);
  expect_code([&] { Context c(MPI_COMM_WORLD, test_options()); }, Errc::kInvalidArgument,
              "FLUXCPP_BIND");
  unsetenv("FLUXCPP_BIND");
  if (world_rank() == 0) setenv("FLUXCPP_TIMEOUT_S", "soon", 1);
  ContextOptions o = test_options();
  o.timeout_s = 0;  // fall back to the environment
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "FLUXCPP_TIMEOUT_S");
  unsetenv("FLUXCPP_TIMEOUT_S");
  Context ok(MPI_COMM_WORLD, o);
}

// A wait satisfied after ~50 ms succeeds under a context whose timeout is infinite or too large
// for a deadline (before, now() + 1e10 s overflowed into the past and every wait timed out).
TEST_F(ContextTest, InfiniteAndHugeTimeoutsWaitForever) {
  for (double t : {std::numeric_limits<double>::infinity(), 1e10, 1e300}) {
    ContextOptions o = test_options(t);
    detail::ContextImpl ctx(MPI_COMM_WORLD, o);
    EXPECT_EQ(ctx.config().timeout_s, t);
    EXPECT_EQ(ctx.deadline(), std::chrono::steady_clock::time_point::max()) << "timeout_s=" << t;
    shm::Signal s;
    std::thread producer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      shm::signal_set(s, 1);
    });
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(shm::signal_wait(s, 1, ctx.deadline(), ctx.wait_policy())) << "timeout_s=" << t;
    const std::chrono::duration<double, std::milli> waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited.count(), 40.0) << "ms until the wait returned, timeout_s=" << t;
    producer.join();
    ctx.close();
  }
  // A finite timeout stays finite.
  detail::ContextImpl finite(MPI_COMM_WORLD, test_options(5));
  EXPECT_LT(finite.deadline(), std::chrono::steady_clock::now() + std::chrono::seconds(6));
}

TEST_F(ContextTest, NanOrNegativeTimeoutIsInvalid) {
  const int last = world_size() - 1;
  ContextOptions o = test_options();
  o.timeout_s = world_rank() == last ? std::nan("") : 1.0;
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "timeout_s=nan");
  o.timeout_s = world_rank() == last ? -1.0 : 1.0;
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "timeout_s=-1");
}

TEST_F(ContextTest, TimeoutFromTheEnvironment) {
  ContextOptions o = test_options();
  o.timeout_s = 0;  // fall back to the environment
  for (const char* bad : {"nan", "-1", "0", "-inf"}) {
    if (world_rank() == 0) setenv("FLUXCPP_TIMEOUT_S", bad, 1);
    expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument,
                std::string("FLUXCPP_TIMEOUT_S='") + bad + "'");
  }
  for (const char* forever : {"inf", "1e10"}) {
    setenv("FLUXCPP_TIMEOUT_S", forever, 1);
    detail::ContextImpl ctx(MPI_COMM_WORLD, o);
    EXPECT_EQ(ctx.deadline(), std::chrono::steady_clock::time_point::max()) << forever;
  }
  unsetenv("FLUXCPP_TIMEOUT_S");
}

// Ranks that pass the extreme values: the comparison must not negate INT64_MIN.
TEST_F(ContextTest, AgreeValueAtTheInt64Extremes) {
  const long long lo = std::numeric_limits<long long>::min();
  const long long hi = std::numeric_limits<long long>::max();
  comm::agree_value(MPI_COMM_WORLD, "test", "x", lo);  // all equal: no error
  comm::agree_value(MPI_COMM_WORLD, "test", "x", hi);
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const int last = world_size() - 1;
  const long long mine = world_rank() == 0 ? lo : (world_rank() == last ? hi : 0);
  expect_code(
      [&] { comm::agree_value(MPI_COMM_WORLD, "test", "x", mine); }, Errc::kInvalidArgument,
      fmt::format("test: ranks disagree on x: rank 0 passed {}, rank {} passed {}", lo, last, hi));
}

// Launch guard: processes that a launcher started as N but that each see an MPI_COMM_WORLD of
// one rank (torchrun, srun without MPI support) are told how to launch.
TEST_F(ContextTest, LaunchGuard) {
  if (world_size() == 1) {
    setenv("WORLD_SIZE", "2", 1);
    expect_code([&] { Context c(MPI_COMM_WORLD, test_options()); }, Errc::kInvalidUsage,
                "WORLD_SIZE=2");
    expect_code([&] { Context c(MPI_COMM_WORLD, test_options()); }, Errc::kInvalidUsage,
                "mpirun -np 2");
    // A copy of the world is the world; MPI_COMM_SELF itself asks for this process alone.
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    expect_code([&] { Context c(dup, test_options()); }, Errc::kInvalidUsage, "srun --mpi=pmix");
    MPI_Comm_free(&dup);
    {
      Context self(MPI_COMM_SELF, test_options());
      EXPECT_EQ(self.world_size(), 1);
    }
    setenv("FLUXCPP_LAUNCH_GUARD", "off", 1);
    { Context off(MPI_COMM_WORLD, test_options()); }
    unsetenv("FLUXCPP_LAUNCH_GUARD");
    setenv("WORLD_SIZE", "1", 1);
    { Context one(MPI_COMM_WORLD, test_options()); }
    unsetenv("WORLD_SIZE");
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    expect_code([&] { Context c(MPI_COMM_WORLD, test_options()); }, Errc::kInvalidUsage,
                "SLURM_STEP_NUM_TASKS=4");
    unsetenv("SLURM_STEP_NUM_TASKS");
    return;
  }
  // A real multi-rank world, or a one-rank communicator that is not the world: no guard.
  setenv("WORLD_SIZE", "64", 1);
  { Context world(MPI_COMM_WORLD, test_options()); }
  { Context self(MPI_COMM_SELF, test_options()); }
  unsetenv("WORLD_SIZE");
}

// How an op reads its own declared setting.
TEST_F(ContextTest, EnvChoiceReadsADeclaredVariable) {
  const auto choices = {"auto", "zero_copy", "copy"};
  unsetenv("FLUXCPP_AG_GEMM_MODE");
  EXPECT_EQ(env_choice("FLUXCPP_AG_GEMM_MODE", choices), 0);  // the declared default
  setenv("FLUXCPP_AG_GEMM_MODE", "copy", 1);
  EXPECT_EQ(env_choice("FLUXCPP_AG_GEMM_MODE", choices), 2);
  setenv("FLUXCPP_AG_GEMM_MODE", "sideways", 1);
  expect_code([&] { env_choice("FLUXCPP_AG_GEMM_MODE", choices); }, Errc::kInvalidArgument,
              "config: FLUXCPP_AG_GEMM_MODE='sideways' must be auto, zero_copy or copy");
  unsetenv("FLUXCPP_AG_GEMM_MODE");
  expect_code([&] { env_choice("FLUXCPP_NOT_DECLARED", {"a"}); }, Errc::kInternal,
              "undeclared variable FLUXCPP_NOT_DECLARED");
}

// Settings the protocols depend on must agree; a mismatch names the values, not enum numbers.
TEST_F(ContextTest, SettingsThatDisagreeAreNamed) {
  if (world_size() < 2) return;
  if (world_rank() == 0) setenv("FLUXCPP_COPY_ENGINE", "shm", 1);
  Context ctx(MPI_COMM_WORLD, test_options());
  unsetenv("FLUXCPP_COPY_ENGINE");
  expect_code([&] { AllGather op(ctx, {16 * world_size(), 8, DType::kFloat32}); },
              Errc::kInvalidArgument,
              "ranks disagree on FLUXCPP_COPY_ENGINE: rank 1 has auto, rank 0 has shm");
  if (world_rank() == 0) setenv("FLUXCPP_AG_GEMM_MODE", "copy", 1);
  AgGemmOptions o;
  o.max_m = 16 * world_size();
  o.n = 8;
  o.k = 8;
  expect_code([&] { AgGemm op(ctx, o); }, Errc::kInvalidArgument, "rank 0 has copy");
  unsetenv("FLUXCPP_AG_GEMM_MODE");
  ctx.close();
}

TEST_F(ContextTest, BindingToCoresWorks) {
  setenv("FLUXCPP_BIND", "core", 1);
  Context c(MPI_COMM_WORLD, test_options());
  unsetenv("FLUXCPP_BIND");
  EXPECT_EQ(c.world_size(), world_size());
}

// Run with FLUXCPP_TEST_THREAD_LEVEL=single and ranks on several (simulated) hosts.
TEST_F(ContextTest, MultiHostNeedsThreadMultiple) {
  int provided = 0;
  MPI_Query_thread(&provided);
  ContextOptions o = test_options();
  bool multi_host = o.ranks_per_host > 0 && o.ranks_per_host < world_size();
  if (provided >= MPI_THREAD_MULTIPLE || !multi_host) {
    Context c(MPI_COMM_WORLD, o);  // single host: any thread level works
    SUCCEED();
    return;
  }
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidUsage, "MPI_THREAD_MULTIPLE");
  o.ranks_per_host = 0;
  Context single_host(MPI_COMM_WORLD, o);
  EXPECT_EQ(single_host.num_hosts(), 1);
}

}  // namespace
}  // namespace fluxcpp::test
