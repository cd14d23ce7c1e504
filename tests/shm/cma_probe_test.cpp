// cma_probe_team over the ranks of a host: the real probe, and the grant protocol with the Yama
// policy, the prctl and the peer reads injected (so policy 1 is exercised on any machine).
#include <sys/prctl.h>
#include <unistd.h>

#include <vector>

#include "comm/context_impl.hpp"
#include "mpi_test.hpp"
#include "shm/cma.hpp"
#include "shm/cma_speed.hpp"

namespace fluxcpp::test {
namespace {

using shm::PtracerGrant;

std::vector<unsigned long> g_calls;
bool g_probe_needs_grant = true;  // the fake read works only while this rank holds the grant

int fake_scope() {
  return 1;
}
int fake_set_ptracer(unsigned long who) {
  g_calls.push_back(who);
  return 0;
}
// Reads "work" once this process has granted (a stand-in for the peers' grants: every rank
// grants in the same step of the protocol) or never, depending on g_probe_needs_grant.
bool fake_probe(pid_t, uint64_t, uint64_t) {
  return g_probe_needs_grant && PtracerGrant::granted();
}

class CmaProbeTest : public MpiTest {
 protected:
  // One host: every rank of the world (the test does not force a layout).
  static ContextOptions one_host() {
    ContextOptions o = test_options();
    o.ranks_per_host = 0;
    return o;
  }
  // Policy 1 and the fakes above, until TearDown; probe_needs_grant as g_probe_needs_grant.
  void inject(bool probe_needs_grant) {
    g_calls.clear();
    g_probe_needs_grant = probe_needs_grant;
    shm::CmaHooks h = shm::cma_default_hooks();
    h.read_scope = fake_scope;
    h.set_ptracer = fake_set_ptracer;
    h.probe = fake_probe;
    previous_ = shm::cma_set_hooks_for_testing(h);
    injected_ = true;
  }
  void TearDown() override {
    if (injected_) shm::cma_set_hooks_for_testing(previous_);
    MpiTest::TearDown();
  }
  shm::CmaHooks previous_;
  bool injected_ = false;
};

TEST_F(CmaProbeTest, RealProbeFindsEveryPeer) {
  detail::ContextImpl ctx(MPI_COMM_WORLD, one_host());
  PtracerGrant grant;
  shm::CmaPeers peers = shm::cma_probe_team(ctx, grant);
  ASSERT_EQ(peers.pids.size(), static_cast<std::size_t>(ctx.host_size()));
  EXPECT_EQ(peers.pids[ctx.host_rank()], getpid());
  // Where the machine allows it without help (policy 0, no Yama, or CAP_SYS_PTRACE) no grant
  // is taken; under policy 1 one is, and held only if it made the probe work.
  if (peers.ok && shm::yama_ptrace_scope() != 1) EXPECT_FALSE(grant.held());
  if (!peers.ok) EXPECT_FALSE(grant.held());
  grant.reset();
  EXPECT_EQ(PtracerGrant::references(), 0);
}

// The single copy's speed next to memcpy (what auto decides by): a real ratio where the probe
// found the peers readable, the same on every rank of the host; 0 alone on the host.
TEST_F(CmaProbeTest, CopyRatioIsMeasuredAndAgreed) {
  detail::ContextImpl ctx(MPI_COMM_WORLD, one_host());
  PtracerGrant grant;
  shm::CmaPeers peers = shm::cma_probe_team(ctx, grant);
  if (!peers.ok) GTEST_SKIP() << "process_vm_readv is not permitted between the ranks here";
  const double ratio = shm::cma_copy_ratio(ctx, peers.pids);
  if (ctx.host_size() == 1) {
    EXPECT_EQ(ratio, 0.0);
    return;
  }
  EXPECT_GT(ratio, 0.0);
  EXPECT_LT(ratio, 1e6) << "a read failed although the probe found every peer readable";
  std::vector<double> all(static_cast<std::size_t>(ctx.world_size()));
  MPI_Allgather(&ratio, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
  for (double r : all) EXPECT_EQ(r, ratio) << "every rank of the host decides from the same ratio";
}

TEST_F(CmaProbeTest, GrantsUnderRestrictedPolicyAndKeepsItWhenItHelps) {
  detail::ContextImpl ctx(MPI_COMM_WORLD, one_host());
  inject(/*probe_needs_grant=*/true);
  PtracerGrant grant;
  shm::CmaPeers peers = shm::cma_probe_team(ctx, grant);
  EXPECT_TRUE(peers.ok);
  if (ctx.host_size() == 1) {
    EXPECT_TRUE(g_calls.empty()) << "a rank alone on its host needs no permission";
    EXPECT_FALSE(grant.held());
    return;
  }
  ASSERT_EQ(g_calls.size(), 1u);
  EXPECT_EQ(g_calls[0], static_cast<unsigned long>(PR_SET_PTRACER_ANY));
  EXPECT_TRUE(grant.held());
  EXPECT_TRUE(PtracerGrant::granted());
  grant.reset();  // the op is destroyed: the last reference undoes the permission
  ASSERT_EQ(g_calls.size(), 2u);
  EXPECT_EQ(g_calls[1], 0ul);
  EXPECT_FALSE(PtracerGrant::granted());
}

TEST_F(CmaProbeTest, AFailedProbeUndoesTheGrantAtOnce) {
  detail::ContextImpl ctx(MPI_COMM_WORLD, one_host());
  inject(/*probe_needs_grant=*/false);  // nothing helps
  PtracerGrant grant;
  shm::CmaPeers peers = shm::cma_probe_team(ctx, grant);
  if (ctx.host_size() == 1) {
    EXPECT_TRUE(peers.ok);
    EXPECT_TRUE(g_calls.empty());
    return;
  }
  EXPECT_FALSE(peers.ok);
  EXPECT_FALSE(grant.held());
  ASSERT_EQ(g_calls.size(), 2u) << "set for the second probe, undone after it failed";
  EXPECT_EQ(g_calls[0], static_cast<unsigned long>(PR_SET_PTRACER_ANY));
  EXPECT_EQ(g_calls[1], 0ul);
  EXPECT_EQ(PtracerGrant::references(), 0);
}

}  // namespace
}  // namespace fluxcpp::test
