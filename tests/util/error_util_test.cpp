// resize_or_raise: an allocation that cannot succeed is kSystem naming op, buffer and size.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "error_util.hpp"

namespace fluxcpp {
namespace {

template <typename F>
std::string system_error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kSystem) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(ResizeOrRaise, OutOfMemoryNamesOpBufferAndBytes) {
  // Below max_size() but beyond any address space: the allocation itself fails.
  std::vector<char> v;
  const std::size_t n = v.max_size();
  const std::string msg =
      system_error_of([&] { resize_or_raise(v, n, "ag_gemm", "the gather buffer"); });
  EXPECT_EQ(msg, "ag_gemm: cannot allocate " + std::to_string(n) +
                     " bytes for the gather buffer: out of memory");
  EXPECT_TRUE(v.empty());
}

TEST(ResizeOrRaise, BeyondMaxSizeNamesElements) {
  std::vector<uint64_t> v;
  const std::size_t n = std::numeric_limits<std::size_t>::max() / 4;
  const std::string msg = system_error_of([&] { resize_or_raise(v, n, "a2a_gemm", "the blocks"); });
  EXPECT_NE(msg.find("a2a_gemm: cannot allocate " + std::to_string(n) + " elements of 8 bytes"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("the blocks"), std::string::npos) << msg;
}

TEST(ResizeOrRaise, SucceedsLikeResize) {
  std::string s = "ab";
  resize_or_raise(s, 4, "test", "a string");
  EXPECT_EQ(s, std::string("ab\0\0", 4));
  std::vector<int> v;
  resize_or_raise(v, 3, "test", "a vector");
  EXPECT_EQ(v, std::vector<int>(3, 0));
}

}  // namespace
}  // namespace fluxcpp
