// comm::Topology, the plain value of where a context's ranks are: the queries over every layout
// the constructors build (one host, even hosts, uneven hosts) and the layouts it refuses.
#include <gtest/gtest.h>

#include <vector>

#include "comm/topology.hpp"
#include "fluxcpp/error.hpp"

namespace fluxcpp::comm {
namespace {

TEST(Topology, AloneByDefault) {
  const Topology t;
  EXPECT_EQ(t.world_rank(), 0);
  EXPECT_EQ(t.world_size(), 1);
  EXPECT_EQ(t.num_hosts(), 1);
  EXPECT_EQ(t.host_size(), 1);
  EXPECT_TRUE(t.uniform_hosts());
}

TEST(Topology, OneHost) {
  for (int w : {1, 2, 5})
    for (int r = 0; r < w; ++r) {
      const Topology t = Topology::one_host(r, w);
      EXPECT_EQ(t.world_size(), w);
      EXPECT_EQ(t.num_hosts(), 1);
      EXPECT_EQ(t.host_id(), 0);
      EXPECT_EQ(t.host_rank(), r);
      EXPECT_EQ(t.host_size(), w);
      EXPECT_TRUE(t.uniform_hosts());
      for (int q = 0; q < w; ++q) {
        EXPECT_EQ(t.host_of(q), 0);
        EXPECT_EQ(t.local_of(q), q);
        EXPECT_EQ(t.world_rank_of(0, q), q);
      }
    }
}

// Ranks interleaved over hosts (host of rank r: r % H), as a launcher placing round-robin would.
TEST(Topology, InterleavedHosts) {
  const int H = 3, W = 6;
  std::vector<int> host(W), local(W);
  for (int r = 0; r < W; ++r) host[r] = r % H, local[r] = r / H;
  for (int r = 0; r < W; ++r) {
    const Topology t(r, host, local);
    EXPECT_EQ(t.num_hosts(), H);
    EXPECT_EQ(t.host_id(), r % H);
    EXPECT_EQ(t.host_rank(), r / H);
    EXPECT_EQ(t.host_size(), W / H);
    EXPECT_TRUE(t.uniform_hosts());
    for (int q = 0; q < W; ++q) EXPECT_EQ(t.world_rank_of(t.host_of(q), t.local_of(q)), q);
  }
}

TEST(Topology, UnevenHosts) {
  const Topology t(3, {0, 0, 0, 1}, {0, 1, 2, 0});
  EXPECT_EQ(t.num_hosts(), 2);
  EXPECT_EQ(t.host_id(), 1);
  EXPECT_EQ(t.host_rank(), 0);
  EXPECT_EQ(t.host_size(), 1);
  EXPECT_FALSE(t.uniform_hosts());
  EXPECT_EQ(t.world_rank_of(0, 2), 2);
}

TEST(Topology, CopiesAreValues) {
  Topology a(1, {0, 1}, {0, 0});
  const Topology b = a;
  a = Topology::one_host(0, 4);
  EXPECT_EQ(b.world_rank(), 1);
  EXPECT_EQ(b.num_hosts(), 2);
  EXPECT_EQ(a.num_hosts(), 1);
}

TEST(Topology, RefusesBrokenLayouts) {
  // The code of the error `make` raises (-1: none).
  auto code = [](auto&& make) {
    try {
      make();
    } catch (const Error& e) {
      return static_cast<int>(e.code());
    }
    return -1;
  };
  const int internal = static_cast<int>(Errc::kInternal);
  EXPECT_EQ(code([] { Topology(2, {0, 0}, {0, 1}); }), internal);   // rank out of range
  EXPECT_EQ(code([] { Topology(0, {0, 0}, {0}); }), internal);      // sizes differ
  EXPECT_EQ(code([] { Topology(0, {0, 0}, {0, 2}); }), internal);   // local rank 1 missing
  EXPECT_EQ(code([] { Topology(0, {0, -1}, {0, 0}); }), internal);  // no host
}

}  // namespace
}  // namespace fluxcpp::comm
