// Context: layout detection, forced hosts, options and the thread-level rule.
#include <cstdlib>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"

namespace fluxcpp::test {
namespace {

class ContextTest : public MpiTest {};

TEST_F(ContextTest, LayoutMatchesWorld) {
  Context ctx(MPI_COMM_WORLD, test_options());
  EXPECT_EQ(ctx.rank(), world_rank());
  EXPECT_EQ(ctx.world_size(), world_size());
  const int rpn = test_ranks_per_node();
  if (rpn > 0) {
    EXPECT_EQ(ctx.node_id(), world_rank() / rpn);
    EXPECT_EQ(ctx.node_rank(), world_rank() % rpn);
    EXPECT_EQ(ctx.num_nodes(), (world_size() + rpn - 1) / rpn);
    int expect_size = std::min(rpn, world_size() - ctx.node_id() * rpn);
    EXPECT_EQ(ctx.node_size(), expect_size);
  } else {
    // Every rank of a test run shares this machine.
    EXPECT_EQ(ctx.num_nodes(), 1);
    EXPECT_EQ(ctx.node_size(), world_size());
    EXPECT_EQ(ctx.node_rank(), world_rank());
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
  o.ranks_per_node = r == 0 ? -1 : 1;
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "ranks_per_node");
  if (world_size() > 1) {
    o.ranks_per_node = r == 0 ? 1 : 2;
    expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "disagree");
  }
  o = test_options();
  o.timeout_s = r == world_size() - 1 ? -3.0 : 1.0;
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidArgument, "timeout_s");
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
  bool multi_host = o.ranks_per_node > 0 && o.ranks_per_node < world_size();
  if (provided >= MPI_THREAD_MULTIPLE || !multi_host) {
    Context c(MPI_COMM_WORLD, o);  // single host: any thread level works
    SUCCEED();
    return;
  }
  expect_code([&] { Context c(MPI_COMM_WORLD, o); }, Errc::kInvalidUsage, "MPI_THREAD_MULTIPLE");
  o.ranks_per_node = 0;
  Context single_host(MPI_COMM_WORLD, o);
  EXPECT_EQ(single_host.num_nodes(), 1);
}

}  // namespace
}  // namespace fluxcpp::test
