// The link table (ops/core/links.hpp) for a few layouts, every rank of each, against closed-form
// expectations: hosts of L consecutive ranks (rank g on host g / L, local rank g % L), hosts
// whose ranks interleave, and hosts of different sizes.
#include "ops/core/links.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace fluxcpp::ops {
namespace {

Placement blocks(int N, int L, int rank) {
  Placement p;
  p.rank = rank;
  for (int n = 0; n < N; ++n) {
    p.hosts.emplace_back();
    for (int q = 0; q < L; ++q) p.hosts.back().push_back(n * L + q);
  }
  return p;
}

// Every rank of N hosts x L consecutive ranks.
void check_blocks(int N, int L) {
  const int W = N * L;
  for (int r = 0; r < W; ++r) {
    SCOPED_TRACE(testing::Message() << N << " hosts x " << L << ", rank " << r);
    const Links t(blocks(N, L, r));
    const int n0 = r / L, me = r % L;
    EXPECT_EQ(t.world(), W);
    EXPECT_EQ(t.hosts(), N);
    EXPECT_EQ(t.host(), n0);
    EXPECT_EQ(t.local(), me);
    EXPECT_EQ(t.host_size(), L);
    EXPECT_TRUE(t.uniform());
    EXPECT_EQ(t.networked(), N > 1);
    for (int g = 0; g < W; ++g) {
      const Link& l = t.link(g);
      EXPECT_EQ(l.rank, g);
      EXPECT_EQ(l.host, g / L);
      EXPECT_EQ(l.local, g % L);
      const Route want = g == r ? Route::kSelf : g / L == n0 ? Route::kSlot : Route::kNet;
      EXPECT_EQ(l.route, want) << "g=" << g;
      EXPECT_EQ(l.rail, want == Route::kNet ? (g / L) * L + me : -1) << "g=" << g;
      EXPECT_EQ(l.direct, want == Route::kNet && g % L == me) << "g=" << g;
      EXPECT_EQ(t.rank_of(g / L, g % L), g);
    }
    for (int n = 0; n < N; ++n) EXPECT_EQ(t.rail(n), n * L + me);
    EXPECT_EQ(t.rank_of(0, L), -1);
    std::vector<int> up, down, up_self, ring, members, sum, next, prev, arrivals, send, receive;
    for (int i = 1; i < W; ++i) up.push_back((r + i) % W), down.push_back((r + W - i) % W);
    up_self = up;
    up_self.push_back(r);
    for (int i = 1; i < W; ++i)  // other hosts first, then this host, each in ring order
      if ((r + i) % W / L != n0) send.push_back((r + i) % W);
    for (int i = 1; i < W; ++i)
      if ((r + i) % W / L == n0) send.push_back((r + i) % W);
    for (int i = 1; i < W; ++i)
      if ((r + W - i) % W / L == n0) receive.push_back((r + W - i) % W);
    for (int i = 1; i < W; ++i)
      if ((r + W - i) % W / L != n0) receive.push_back((r + W - i) % W);
    for (int i = 1; i < L; ++i) ring.push_back(n0 * L + (me + i) % L);
    for (int q = 0; q < L; ++q) members.push_back(n0 * L + q);
    for (int i = 1; i < L; ++i) sum.push_back((me + L - i) % L);
    sum.push_back(me);
    for (int i = 1; i < N; ++i) next.push_back((n0 + i) % N), prev.push_back((n0 + N - i) % N);
    for (int i = 1; i < N; ++i)
      for (int j = 0; j < L; ++j) arrivals.push_back((n0 + i) % N * L + (me + j) % L);
    EXPECT_EQ(t.up(), up);
    EXPECT_EQ(t.down(), down);
    EXPECT_EQ(t.up_self(), up_self);
    EXPECT_EQ(t.send(), send);
    EXPECT_EQ(t.receive(), receive);
    EXPECT_EQ(t.host_ring(), ring);
    EXPECT_EQ(t.host_members(), members);
    EXPECT_EQ(t.sum_order(), sum);
    EXPECT_EQ(t.next_hosts(), next);
    EXPECT_EQ(t.prev_hosts(), prev);
    EXPECT_EQ(t.arrivals(), arrivals);
    const std::vector<std::pair<int, int64_t>> runs{{n0 * L, L}};
    EXPECT_EQ(t.host_runs(), runs);
  }
}

TEST(Links, OneHostOfThree) {
  check_blocks(1, 3);
}
TEST(Links, TwoHostsOfTwo) {
  check_blocks(2, 2);
}
TEST(Links, ThreeHostsOfOne) {
  check_blocks(3, 1);
}
TEST(Links, TwoHostsOfThree) {
  check_blocks(2, 3);
}
TEST(Links, OneRank) {
  check_blocks(1, 1);
}

// Hosts whose ranks interleave (host 0: 0 and 2, host 1: 1 and 3): the host's runs are single
// ranks, the rail peers and the all-to-all orders follow the placement, not the numbering.
TEST(Links, InterleavedHosts) {
  Placement p;
  p.hosts = {{0, 2}, {1, 3}};
  p.rank = 2;
  const Links t(p);
  EXPECT_EQ(t.host(), 0);
  EXPECT_EQ(t.local(), 1);
  EXPECT_EQ(t.link(0).route, Route::kSlot);
  EXPECT_EQ(t.link(1).route, Route::kNet);
  EXPECT_EQ(t.link(1).rail, 3);
  EXPECT_FALSE(t.link(1).direct);
  EXPECT_TRUE(t.link(3).direct);
  EXPECT_EQ(t.host_ring(), (std::vector<int>{0}));
  EXPECT_EQ(t.send(), (std::vector<int>{3, 1, 0}));     // up 3, 0, 1: network first
  EXPECT_EQ(t.receive(), (std::vector<int>{0, 1, 3}));  // down 1, 0, 3: this host first
  EXPECT_EQ(t.arrivals(), (std::vector<int>{3, 1}));
  const std::vector<std::pair<int, int64_t>> runs{{0, 1}, {2, 1}};
  EXPECT_EQ(t.host_runs(), runs);
}

// Hosts of 3 and 1 ranks: described, not uniform; local ranks 1 and 2 have no rail peer on the
// small host.
TEST(Links, DifferentHostSizes) {
  Placement p;
  p.hosts = {{0, 1, 2}, {3}};
  for (int r = 0; r < 4; ++r) {
    p.rank = r;
    const Links t(p);
    EXPECT_FALSE(t.uniform());
    EXPECT_EQ(t.host_size(0), 3);
    EXPECT_EQ(t.host_size(1), 1);
    EXPECT_EQ(t.rail(1), r == 0 ? 3 : r == 3 ? 3 : -1) << r;
  }
  p.rank = 2;
  const Links t(p);
  EXPECT_EQ(t.link(3).rail, -1);
  EXPECT_EQ(t.sum_order(), (std::vector<int>{1, 0, 2}));
  EXPECT_EQ(t.arrivals(), (std::vector<int>{3}));
  p.rank = 3;
  const Links u(p);
  EXPECT_EQ(u.rail(0), 0);
  EXPECT_EQ(u.arrivals(), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(u.host_ring().empty());
}

TEST(Links, RejectsBadPlacement) {
  Placement p;
  p.hosts = {{0, 1}, {1}};
  EXPECT_ANY_THROW(Links{p});
  p.hosts = {{0, 1}};
  p.rank = 2;
  EXPECT_ANY_THROW(Links{p});
}

TEST(Links, RingNeighbours) {
  EXPECT_EQ(Links::ring_neighbours(0, 1), std::vector<int>{});
  EXPECT_EQ(Links::ring_neighbours(0, 2), std::vector<int>{1});
  EXPECT_EQ(Links::ring_neighbours(1, 4), (std::vector<int>{0, 2}));
}

TEST(Links, HostSumOrder) {
  // L = 4, me = 1: 0, 3, 2, then 1 itself.
  std::vector<int> got;
  for (int i = 0; i < 4; ++i) got.push_back(host_sum_order(1, 4, i));
  EXPECT_EQ(got, (std::vector<int>{0, 3, 2, 1}));
}

}  // namespace
}  // namespace fluxcpp::ops
