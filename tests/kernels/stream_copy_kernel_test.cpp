// Unit tests of the non-temporal copy (kernels/stream_copy.hpp): the same bytes as memcpy for
// every destination and source alignment within a cache line and lengths around the line and
// vector sizes, nothing written outside the destination, and the cache size it reports.
// Single process, no MPI.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernel_test_data.hpp"
#include "kernels/stream_copy.hpp"

namespace fluxcpp::kernels {
namespace {

constexpr unsigned char kGuard = 0xA5;

std::vector<unsigned char> random_bytes(std::size_t n, uint64_t seed) {
  test::Rng rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng.next() >> 56);
  return v;
}

// Copies `len` bytes from src + soff to dst + doff (offsets within a 64-byte line of 64-aligned
// buffers) and checks them, and that the guard bytes around the destination are untouched.
void check_copy(std::size_t len, std::size_t doff, std::size_t soff) {
  constexpr std::size_t kPad = 128;
  const std::vector<unsigned char> src = random_bytes(len + soff + kPad, len * 131 + soff * 7 + doff);
  alignas(64) static unsigned char dst_buf[(1 << 17) + 4 * kPad];
  ASSERT_LE(len + doff + 2 * kPad, sizeof dst_buf);
  std::memset(dst_buf, kGuard, sizeof dst_buf);
  unsigned char* dst = dst_buf + kPad + doff;
  stream_copy(dst, src.data() + soff, len);
  ASSERT_EQ(std::memcmp(dst, src.data() + soff, len), 0)
      << "len " << len << " dst offset " << doff << " src offset " << soff;
  for (std::size_t i = 0; i < kPad + doff; ++i)
    ASSERT_EQ(dst_buf[i], kGuard) << "written before dst at " << i << ", len " << len;
  for (std::size_t i = kPad + doff + len; i < sizeof dst_buf; ++i)
    ASSERT_EQ(dst_buf[i], kGuard) << "written past dst at " << i << ", len " << len;
}

TEST(StreamCopy, SameBytesAsMemcpyAtEveryAlignment) {
  for (std::size_t len : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 1000, 4096, 65599})
    for (std::size_t doff = 0; doff < 64; doff += 1)
      for (std::size_t soff : {0, 1, 8, 33, 63}) {
        check_copy(len, doff, soff);
        if (HasFatalFailure()) return;
      }
}

TEST(StreamCopy, LargeCopy) {
  check_copy(1 << 17, 0, 0);
  check_copy((1 << 17) - 3, 5, 2);
}

TEST(StreamCopy, LastLevelCacheSize) {
  const std::size_t b = last_level_cache_bytes();
  EXPECT_GE(b, std::size_t{64} << 10);  // no CPU this runs on has a smaller last level
  EXPECT_LE(b, std::size_t{64} << 30);
  EXPECT_EQ(b, last_level_cache_bytes());  // read once
}

}  // namespace
}  // namespace fluxcpp::kernels
