// moe_layout against an independent plain-loop reference: the routed slots collected as
// (expert, t, k) triples, sorted, and numbered; counts, rank rows and rank tokens counted with
// sets. Every output is compared bit for bit (memcmp), including the −1 entries. Single process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fluxcpp/error.hpp"
#include "fluxcpp/moe_layout.hpp"

namespace fluxcpp {
namespace {

// splitmix64: deterministic on every platform.
uint64_t next_random(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

enum class Routing { kUniform, kSkewed, kUnrouted, kDuplicates, kAllUnrouted };

const char* routing_name(Routing r) {
  switch (r) {
    case Routing::kUniform: return "uniform";
    case Routing::kSkewed: return "skewed";
    case Routing::kUnrouted: return "unrouted";
    case Routing::kDuplicates: return "duplicates";
    case Routing::kAllUnrouted: return "all_unrouted";
  }
  return "?";
}

// A routing table [T, K]. skewed: expert E/2 takes about half the slots; unrouted: about a
// quarter of the slots are −1; duplicates: every token names one expert in all its slots but
// the last (which is random); uniform ids repeat within a token by chance.
std::vector<int32_t> make_ids(int64_t T, int64_t K, int64_t E, Routing r, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<std::size_t>(T * K));
  uint64_t s = seed;
  for (int64_t t = 0; t < T; ++t) {
    const auto same = static_cast<int32_t>(next_random(s) % E);
    for (int64_t k = 0; k < K; ++k) {
      const uint64_t x = next_random(s);
      auto e = static_cast<int32_t>(x % E);
      switch (r) {
        case Routing::kUniform: break;
        case Routing::kSkewed: e = (x >> 32) % 2 == 0 ? static_cast<int32_t>(E / 2) : e; break;
        case Routing::kUnrouted: e = (x >> 32) % 4 == 0 ? -1 : e; break;
        case Routing::kDuplicates: e = k + 1 < K ? same : e; break;
        case Routing::kAllUnrouted: e = -1; break;
      }
      ids[static_cast<std::size_t>(t * K + k)] = e;
    }
  }
  return ids;
}

// The reference, written from the definitions and nothing else.
MoeLayout reference(const std::vector<int32_t>& ids, int64_t T, int64_t K, int64_t E, int64_t R) {
  const int64_t L = E / R;
  MoeLayout ref;
  ref.expert_counts.assign(static_cast<std::size_t>(E), 0);
  ref.rank_rows.assign(static_cast<std::size_t>(R), 0);
  ref.rank_tokens.assign(static_cast<std::size_t>(R), 0);
  ref.scatter_index.assign(static_cast<std::size_t>(T * K), -1);
  ref.gather_index.assign(static_cast<std::size_t>(T * K), -1);
  ref.topk_index.assign(static_cast<std::size_t>(T * K), -1);
  std::vector<std::tuple<int64_t, int64_t, int64_t>> slots;  // (expert, t, k)
  for (int64_t t = 0; t < T; ++t) {
    std::set<int64_t> owners;
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = ids[static_cast<std::size_t>(t * K + k)];
      if (e < 0) continue;
      slots.emplace_back(e, t, k);
      ++ref.expert_counts[static_cast<std::size_t>(e)];
      ++ref.rank_rows[static_cast<std::size_t>(e / L)];
      owners.insert(e / L);
    }
    for (int64_t q : owners) ++ref.rank_tokens[static_cast<std::size_t>(q)];
  }
  std::sort(slots.begin(), slots.end());
  for (std::size_t row = 0; row < slots.size(); ++row) {
    const auto [e, t, k] = slots[row];
    ref.scatter_index[static_cast<std::size_t>(t * K + k)] = static_cast<int32_t>(row);
    ref.gather_index[row] = static_cast<int32_t>(t);
    ref.topk_index[row] = static_cast<int32_t>(k);
  }
  return ref;
}

template <typename T>
void expect_same(const std::vector<T>& want, const std::vector<T>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size() * sizeof(T)) == 0) return;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i]) {
      ADD_FAILURE() << what << ": first difference at [" << i << "]: expected " << want[i]
                    << ", got " << got[i];
      return;
    }
}

void expect_layout(const MoeLayout& want, const MoeLayout& got, const std::string& what) {
  expect_same(want.expert_counts, got.expert_counts, what + " expert_counts");
  expect_same(want.rank_rows, got.rank_rows, what + " rank_rows");
  expect_same(want.rank_tokens, got.rank_tokens, what + " rank_tokens");
  expect_same(want.scatter_index, got.scatter_index, what + " scatter_index");
  expect_same(want.gather_index, got.gather_index, what + " gather_index");
  expect_same(want.topk_index, got.topk_index, what + " topk_index");
}

TEST(MoeLayout, MatchesSortedReference) {
  const Routing routings[] = {Routing::kUniform, Routing::kSkewed, Routing::kUnrouted,
                              Routing::kDuplicates, Routing::kAllUnrouted};
  uint64_t seed = 1;
  for (int64_t E : {1, 4, 64})
    for (int64_t K : {1, 2, 6})
      for (int64_t R : {1, 2, 4}) {
        if (E % R != 0) continue;  // E = 1 has a single owner
        for (Routing r : routings)
          for (int64_t T : {0, 1, 37, 1000}) {
            const std::string what = std::string(routing_name(r)) + " T=" + std::to_string(T) +
                                     " K=" + std::to_string(K) + " E=" + std::to_string(E) +
                                     " ranks=" + std::to_string(R);
            const std::vector<int32_t> ids = make_ids(T, K, E, r, ++seed);
            const MoeLayout got = moe_layout(T == 0 ? nullptr : ids.data(), T, K, E, R);
            expect_layout(reference(ids, T, K, E, R), got, what);
            if (HasFailure()) return;
          }
      }
}

// The skewed routing really is skewed, so the test above covers a dominant expert.
TEST(MoeLayout, SkewedRoutingHasADominantExpert) {
  const int64_t T = 1000, K = 6, E = 64;
  const MoeLayout got = moe_layout(make_ids(T, K, E, Routing::kSkewed, 5).data(), T, K, E, 4);
  EXPECT_GT(got.expert_counts[E / 2], T * K * 4 / 10);
}

// Optional outputs may be null: each output alone equals the full call's, and nothing else is
// written (the other buffers keep their poison).
TEST(MoeLayout, NullOptionalOutputs) {
  const int64_t T = 300, K = 2, E = 8, R = 2;
  const std::vector<int32_t> ids = make_ids(T, K, E, Routing::kUnrouted, 9);
  const MoeLayout full = moe_layout(ids.data(), T, K, E, R);
  for (int which = 0; which < 6; ++which) {
    MoeLayout got;
    got.expert_counts.assign(E, -7);
    got.rank_rows.assign(R, -7);
    got.rank_tokens.assign(R, -7);
    got.scatter_index.assign(T * K, -7);
    got.gather_index.assign(T * K, -7);
    got.topk_index.assign(T * K, -7);
    MoeLayoutOutputs o;
    o.expert_counts = got.expert_counts.data();
    if (which == 1) o.rank_rows = got.rank_rows.data();
    if (which == 2) o.rank_tokens = got.rank_tokens.data();
    if (which == 3) o.scatter_index = got.scatter_index.data();
    if (which == 4) o.gather_index = got.gather_index.data();
    if (which == 5) o.topk_index = got.topk_index.data();
    moe_layout(ids.data(), T, K, E, R, o);
    const std::string what = "only output " + std::to_string(which);
    expect_same(full.expert_counts, got.expert_counts, what);
    const auto poison64 = [](std::size_t n) { return std::vector<int64_t>(n, -7); };
    const auto poison32 = [](std::size_t n) { return std::vector<int32_t>(n, -7); };
    expect_same(which == 1 ? full.rank_rows : poison64(R), got.rank_rows, what + " rank_rows");
    expect_same(which == 2 ? full.rank_tokens : poison64(R), got.rank_tokens, what);
    expect_same(which == 3 ? full.scatter_index : poison32(T * K), got.scatter_index, what);
    expect_same(which == 4 ? full.gather_index : poison32(T * K), got.gather_index, what);
    expect_same(which == 5 ? full.topk_index : poison32(T * K), got.topk_index, what);
  }
}

// Equal inputs give equal bits, from several threads at once.
TEST(MoeLayout, ConcurrentCallsAgree) {
  const int64_t T = 2000, K = 6, E = 64, R = 4;
  const std::vector<int32_t> ids = make_ids(T, K, E, Routing::kSkewed, 11);
  const MoeLayout want = moe_layout(ids.data(), T, K, E, R);
  std::vector<MoeLayout> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got)
    threads.emplace_back([&ids, &g] {
      for (int i = 0; i < 20; ++i) g = moe_layout(ids.data(), T, K, E, R);
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) expect_layout(want, g, "concurrent");
}

// Runs fn, expecting Error(kInvalidArgument) whose message contains every needle.
template <typename F>
void expect_invalid(F&& fn, const std::vector<std::string>& needles, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << what << ": " << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << what << ": message lacks '" << n << "': " << e.what();
  }
}

TEST(MoeLayout, RejectsBadArguments) {
  const int64_t T = 5, K = 2, E = 8;
  std::vector<int32_t> ids = make_ids(T, K, E, Routing::kUniform, 3);
  std::vector<int64_t> counts(E, -7), ranks(4, -7);
  std::vector<int32_t> scatter(T * K, -7);
  MoeLayoutOutputs o;
  o.expert_counts = counts.data();
  o.rank_rows = ranks.data();
  o.scatter_index = scatter.data();
  auto call = [&](const int32_t* p, int64_t t, int64_t k, int64_t e, int64_t r) {
    return [=] { moe_layout(p, t, k, e, r, o); };
  };
  for (int32_t bad : {8, 9, -2, std::numeric_limits<int32_t>::min()}) {
    std::vector<int32_t> b = ids;
    b[3 * K + 1] = bad;  // token 3, k 1
    expect_invalid(
        call(b.data(), T, K, E, 2),
        {"moe_layout", "topk_ids[t=3][k=1]=" + std::to_string(bad), "[-1, num_experts=8)"},
        "bad id " + std::to_string(bad));
  }
  expect_invalid(call(ids.data(), T, K, E, 3), {"moe_layout", "num_experts=8", "num_ranks=3"},
                 "E % ranks");
  expect_invalid(call(ids.data(), T, 0, E, 2), {"moe_layout", "topk=0"}, "topk 0");
  expect_invalid(call(ids.data(), -1, K, E, 2), {"moe_layout", "num_tokens=-1"}, "T < 0");
  expect_invalid(call(ids.data(), T, K, 0, 1), {"moe_layout", "num_experts=0"}, "E = 0");
  expect_invalid(call(ids.data(), T, K, E, 0), {"moe_layout", "num_ranks=0"}, "ranks = 0");
  // T·K > INT32_MAX, with and without overflowing int64 in a naive product.
  expect_invalid(call(ids.data(), int64_t{1} << 31, 1, E, 2),
                 {"moe_layout", "num_tokens=2147483648", "topk=1", "INT32_MAX"}, "T·K > INT32_MAX");
  expect_invalid(call(ids.data(), std::numeric_limits<int64_t>::max(), 2, E, 2),
                 {"moe_layout", "num_tokens=9223372036854775807"}, "T·K overflows int64");
  expect_invalid(call(nullptr, T, K, E, 2), {"moe_layout", "topk_ids is NULL", "num_tokens=5"},
                 "NULL topk_ids");
  expect_invalid([&] { moe_layout(ids.data(), T, K, E, 2, MoeLayoutOutputs{}); },
                 {"moe_layout", "expert_counts is NULL"}, "NULL expert_counts");
  expect_invalid([&] { moe_layout(ids.data(), T, K, E, 3); }, {"num_ranks=3"}, "allocating form");
  // Nothing was written by any failed call.
  EXPECT_EQ(counts, std::vector<int64_t>(E, -7));
  EXPECT_EQ(ranks, std::vector<int64_t>(4, -7));
  EXPECT_EQ(scatter, std::vector<int32_t>(T * K, -7));

  // NULL topk_ids is fine with no tokens; every index output is then empty.
  const MoeLayout empty = moe_layout(nullptr, 0, K, E, 2);
  EXPECT_EQ(empty.expert_counts, std::vector<int64_t>(E, 0));
  EXPECT_EQ(empty.rank_tokens, std::vector<int64_t>(2, 0));
  EXPECT_TRUE(empty.scatter_index.empty());
}

}  // namespace
}  // namespace fluxcpp
