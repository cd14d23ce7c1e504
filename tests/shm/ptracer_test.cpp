// PtracerGrant: PR_SET_PTRACER_ANY only under Yama policy 1, set by the first reference and
// undone by the last. The policy read and the prctl are injected, so every policy is exercised
// whatever the machine's.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <thread>
#include <vector>

#include "shm/cma.hpp"

namespace fluxcpp::shm {
namespace {

int g_scope = 0;
int g_set_result = 0;
std::vector<unsigned long> g_calls;  // every `who` passed to the fake prctl

int fake_scope() {
  return g_scope;
}
int fake_set_ptracer(unsigned long who) {
  g_calls.push_back(who);
  return g_set_result;
}

class PtracerGrantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_calls.clear();
    g_set_result = 0;
    CmaHooks h = cma_default_hooks();
    h.read_scope = fake_scope;
    h.set_ptracer = fake_set_ptracer;
    previous_ = cma_set_hooks_for_testing(h);
    ASSERT_EQ(PtracerGrant::references(), 0);
  }
  void TearDown() override {
    EXPECT_EQ(PtracerGrant::references(), 0);
    cma_set_hooks_for_testing(previous_);
  }
  CmaHooks previous_;
};

TEST_F(PtracerGrantTest, NothingIsCalledUnlessThePolicyIsRestricted) {
  for (int scope : {-1, 0, 2, 3}) {
    g_scope = scope;
    {
      PtracerGrant a = PtracerGrant::acquire();
      PtracerGrant b = PtracerGrant::acquire();
      EXPECT_TRUE(a.held());
      EXPECT_EQ(PtracerGrant::references(), 2);
      EXPECT_FALSE(PtracerGrant::granted());
    }
    EXPECT_TRUE(g_calls.empty()) << "prctl called under ptrace_scope " << scope;
  }
}

TEST_F(PtracerGrantTest, FirstReferenceSetsLastUndoes) {
  g_scope = 1;
  PtracerGrant a = PtracerGrant::acquire();
  ASSERT_EQ(g_calls.size(), 1u);
  EXPECT_EQ(g_calls[0], static_cast<unsigned long>(PR_SET_PTRACER_ANY));
  EXPECT_TRUE(PtracerGrant::granted());
  {
    PtracerGrant b = PtracerGrant::acquire();
    PtracerGrant moved = std::move(b);  // the moved-from handle releases nothing
    EXPECT_FALSE(b.held());
    EXPECT_EQ(PtracerGrant::references(), 2);
  }
  EXPECT_EQ(g_calls.size(), 1u) << "only the last reference may undo";
  EXPECT_TRUE(PtracerGrant::granted());
  a.reset();
  a.reset();  // idempotent
  ASSERT_EQ(g_calls.size(), 2u);
  EXPECT_EQ(g_calls[1], 0ul) << "the undo clears the ptracer";
  EXPECT_FALSE(PtracerGrant::granted());

  // A new first reference sets it again.
  PtracerGrant c = PtracerGrant::acquire();
  EXPECT_EQ(g_calls.size(), 3u);
  c.reset();
  EXPECT_EQ(g_calls.size(), 4u);
}

TEST_F(PtracerGrantTest, AFailedSetIsNotUndone) {
  g_scope = 1;
  g_set_result = -1;  // e.g. a kernel without PR_SET_PTRACER
  { PtracerGrant a = PtracerGrant::acquire(); }
  EXPECT_EQ(g_calls.size(), 1u);
  EXPECT_FALSE(PtracerGrant::granted());
}

TEST_F(PtracerGrantTest, ReferencesFromManyThreads) {
  g_scope = 1;
  PtracerGrant outer = PtracerGrant::acquire();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 500; ++i) PtracerGrant g = PtracerGrant::acquire();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(g_calls.size(), 1u) << "the outer reference kept the grant throughout";
  outer.reset();
  EXPECT_EQ(g_calls.size(), 2u);
}

}  // namespace
}  // namespace fluxcpp::shm
