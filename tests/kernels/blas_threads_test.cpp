// BlasSingleThreadScope: OpenBLAS runs on one thread while any scope lives, in any thread, and
// the caller's count comes back when the last scope ends.
#include <cblas.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "fluxcpp/error.hpp"
#include "kernels/blas_threads.hpp"

namespace fluxcpp::kernels {
namespace {

// Sets the caller's count to 2 for one test and restores the original afterwards.
class BlasThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    original_ = blas_get_threads();
    blas_set_threads(2);
    if (blas_get_threads() != 2)
      GTEST_SKIP() << "this OpenBLAS cannot run 2 threads (openblas_get_parallel() = "
                   << openblas_get_parallel() << ")";
  }
  void TearDown() override { blas_set_threads(original_); }
  int original_ = 1;
};

TEST_F(BlasThreadsTest, NestedScopesRestoreTheCallersCount) {
  {
    BlasSingleThreadScope outer;
    EXPECT_EQ(blas_get_threads(), 1);
    EXPECT_EQ(BlasSingleThreadScope::active(), 1);
    {
      BlasSingleThreadScope inner;
      EXPECT_EQ(blas_get_threads(), 1);
      EXPECT_EQ(BlasSingleThreadScope::active(), 2);
    }
    EXPECT_EQ(blas_get_threads(), 1) << "an inner scope must not restore while outer lives";
  }
  EXPECT_EQ(blas_get_threads(), 2) << "the last scope to leave restores the caller's count";
  EXPECT_EQ(BlasSingleThreadScope::active(), 0);

  // The count is read anew by the next first scope: a change between calls is kept.
  blas_set_threads(1);
  { BlasSingleThreadScope s; }
  EXPECT_EQ(blas_get_threads(), 1);
}

TEST_F(BlasThreadsTest, OverlappingScopesOnTwoThreads) {
  // A enters, B enters, A leaves (B still inside: count stays 1), B leaves (count back to 2).
  std::atomic<int> step{0};
  auto wait_for = [&](int s) {
    while (step.load() < s) std::this_thread::yield();
  };
  int seen_by_b_after_a_left = -1;
  std::thread a([&] {
    {
      BlasSingleThreadScope s;
      step = 1;
      wait_for(2);
    }
    step = 3;
  });
  std::thread b([&] {
    wait_for(1);
    BlasSingleThreadScope s;
    step = 2;
    wait_for(3);
    seen_by_b_after_a_left = blas_get_threads();
  });
  a.join();
  b.join();
  EXPECT_EQ(seen_by_b_after_a_left, 1) << "A's leaving must not restore while B is inside";
  EXPECT_EQ(blas_get_threads(), 2);
  EXPECT_EQ(BlasSingleThreadScope::active(), 0);
}

TEST_F(BlasThreadsTest, ManyThreadsEnterAndLeave) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        BlasSingleThreadScope s;
        if (blas_get_threads() != 1) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0) << "calls that saw more than one OpenBLAS thread inside a scope";
  EXPECT_EQ(blas_get_threads(), 2);
  EXPECT_EQ(BlasSingleThreadScope::active(), 0);
}

TEST(BlasThreads, SetAndGet) {
  const int previous = blas_set_threads(1);
  EXPECT_GE(previous, 1);
  EXPECT_EQ(blas_get_threads(), 1);
  EXPECT_EQ(blas_set_threads(previous), 1);
  EXPECT_EQ(blas_get_threads(), previous);
  EXPECT_THROW(blas_set_threads(0), Error);
}

}  // namespace
}  // namespace fluxcpp::kernels
