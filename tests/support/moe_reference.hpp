// The unfused references of the expert-parallel MoE ops: routing tables for the tests, and
// dispatch / combine computed with MPI_Alltoall (counts), MPI_Alltoallv (rows) and plain loops,
// independently of the library (no moe_layout, no op code). Header-only; the k-ordered sum of
// the combine reference is compiled without contraction where the test target says so.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {

// The number of experts of the tests' expert-count modes: W, 4·W, 64.
inline int64_t experts_for(int mode, int W) {
  return mode == 0 ? W : mode == 1 ? 4 * W : 64;
}

// Skips (with a message on rank 0) a shape that is illegal at this world size: E % W != 0.
inline bool illegal(int64_t E, int W) {
  if (E % W == 0) return false;
  if (world_rank() == 0)
    std::printf("[  SKIP    ] E=%lld is not divisible by W=%d (E %% ep != 0)\n",
                static_cast<long long>(E), W);
  return true;
}

// A test of one op over cases that carry an expert-count mode (e_mode): E_ is the number of
// experts at this world size; where W does not divide it the test is skipped.
template <typename Case>
class MoeCaseTest : public MpiTest, public ::testing::WithParamInterface<Case> {
 protected:
  void SetUp() override {
    if (illegal(E_, world_size())) GTEST_SKIP() << "E % W != 0";
  }
  const int64_t E_ = experts_for(this->GetParam().e_mode, world_size());
};

enum class Route {
  kUniform,   // ids uniform over the experts, ~1/10 slots -1, duplicates in some tokens
  kSkewed,    // expert 0 takes about half of the slots
  kZeroRank,  // like kUniform, but rank (call % W) has no tokens
};

inline const char* route_name(Route p) {
  switch (p) {
    case Route::kUniform: return "uniform";
    case Route::kSkewed: return "skewed";
    case Route::kZeroRank: return "zero_rank";
  }
  return "?";
}

struct Routing {
  int64_t T = 0;
  std::vector<int32_t> ids;    // [T, K]
  std::vector<float> weights;  // [T, K], values with 3 significant bits
};

// Rank `rank`'s routing for call `call` (any rank can build any rank's).
inline Routing make_routing(Route p, int rank, int W, int64_t E, int64_t K, int64_t max_tokens,
                            int call) {
  Routing rt;
  uint64_t s = seed_of(rank, call, 91);
  rt.T = max_tokens - static_cast<int64_t>((rank * 7 + call * 3) % (max_tokens / 2 + 1));
  if (p == Route::kZeroRank && rank == call % W) rt.T = 0;
  rt.ids.resize(static_cast<std::size_t>(rt.T * K));
  rt.weights.resize(rt.ids.size());
  for (int64_t t = 0; t < rt.T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const uint64_t r = splitmix(s);
      int32_t e = static_cast<int32_t>((r >> 16) % static_cast<uint64_t>(E));
      if (p == Route::kSkewed && (r >> 8) % 2 == 0) e = 0;
      if (r % 10 == 0) e = -1;
      if (k == 1 && t % 5 == 0 && rt.ids[t * K] >= 0) e = rt.ids[t * K];  // a duplicate expert
      rt.ids[t * K + k] = e;
      rt.weights[t * K + k] = static_cast<float>(1 + (r >> 40) % 8) / 8.0f;
    }
  return rt;
}

// Values whose sums round: full random mantissas over a wide exponent range (bf16: 2^-1 down to
// 2^-40), so that a different summation order changes the bits.
inline Bytes spread_tensor(DType t, std::size_t count, uint64_t seed) {
  Bytes b(count * dtype_size(t));
  uint64_t s = seed;
  for (std::size_t i = 0; i < count; ++i) {
    const uint64_t r = splitmix(s);
    const int exp = static_cast<int>((r >> 58) % 25) - 20;  // [-20, 4]
    const double sign = (r & 1) ? -1.0 : 1.0;
    if (t == DType::kFloat32) {
      const float v = static_cast<float>(
          sign * std::ldexp(1.0 + static_cast<double>((r >> 1) & 0x7fffff) / 8388608.0, exp));
      std::memcpy(b.data() + 4 * i, &v, 4);
    } else if (t == DType::kFloat64) {
      const double v =
          sign * std::ldexp(1.0 + static_cast<double>((r >> 6) & ((uint64_t{1} << 52) - 1)) /
                                      4503599627370496.0,
                            exp);
      std::memcpy(b.data() + 8 * i, &v, 8);
    } else {
      const uint16_t v = random_bf16(r, 40);
      std::memcpy(b.data() + 2 * i, &v, 2);
    }
  }
  return b;
}

// What rank r should receive, from MPI_Alltoall + MPI_Alltoallv + loops.
struct DispatchRef {
  std::vector<int64_t> recv_counts;    // [W, L]: c_s[r·L + l] at s·L + l
  std::vector<int64_t> expert_counts;  // [L]
  int64_t rows = 0;                    // R_r
  Bytes recv;                          // [R_r, row]
  std::vector<float> weights;          // [R_r]
  std::vector<int32_t> src;            // [R_r, 3]
};

inline DispatchRef reference_dispatch(const Bytes& input, std::size_t row, const Routing& rt,
                                      int64_t E, int64_t K) {
  const int W = world_size();
  const int64_t L = E / W;
  std::vector<int64_t> c(static_cast<std::size_t>(E), 0);
  for (int32_t e : rt.ids)
    if (e >= 0) ++c[e];
  DispatchRef ref;
  ref.recv_counts.resize(static_cast<std::size_t>(W * L));
  MPI_Alltoall(c.data(), static_cast<int>(L), MPI_INT64_T, ref.recv_counts.data(),
               static_cast<int>(L), MPI_INT64_T, MPI_COMM_WORLD);
  // Rows (and their (t, k, w)) for each destination in (expert, t, k) order.
  constexpr std::size_t kMeta = 12;
  Bytes send_rows, send_meta;
  std::vector<int64_t> send_splits(W, 0), recv_splits(W, 0);
  for (int q = 0; q < W; ++q)
    for (int64_t e = q * L; e < (q + 1) * L; ++e)
      for (int64_t t = 0; t < rt.T; ++t)
        for (int64_t k = 0; k < K; ++k) {
          if (rt.ids[t * K + k] != e) continue;
          send_rows.insert(send_rows.end(), input.begin() + t * row, input.begin() + (t + 1) * row);
          unsigned char m[kMeta];
          const int32_t tk[2] = {static_cast<int32_t>(t), static_cast<int32_t>(k)};
          std::memcpy(m, tk, 8);
          std::memcpy(m + 8, &rt.weights[t * K + k], 4);
          send_meta.insert(send_meta.end(), m, m + kMeta);
          ++send_splits[q];
        }
  for (int s = 0; s < W; ++s)
    for (int64_t l = 0; l < L; ++l) recv_splits[s] += ref.recv_counts[s * L + l];
  const Bytes rows = mpi_alltoallv(send_rows, send_splits, recv_splits, row);
  const Bytes meta = mpi_alltoallv(send_meta, send_splits, recv_splits, kMeta);
  // Reorder by (local expert, source rank).
  std::vector<int64_t> chunk(W, 0);  // first row of source s's chunk
  for (int s = 1; s < W; ++s) chunk[s] = chunk[s - 1] + recv_splits[s - 1];
  ref.expert_counts.assign(static_cast<std::size_t>(L), 0);
  for (int64_t l = 0; l < L; ++l)
    for (int s = 0; s < W; ++s) {
      int64_t at = chunk[s];
      for (int64_t l2 = 0; l2 < l; ++l2) at += ref.recv_counts[s * L + l2];
      for (int64_t i = 0; i < ref.recv_counts[s * L + l]; ++i, ++at) {
        ref.recv.insert(ref.recv.end(), rows.begin() + at * row, rows.begin() + (at + 1) * row);
        int32_t tk[2];
        float w;
        std::memcpy(tk, meta.data() + at * kMeta, 8);
        std::memcpy(&w, meta.data() + at * kMeta + 8, 4);
        ref.weights.push_back(w);
        ref.src.insert(ref.src.end(), {s, tk[0], tk[1]});
        ++ref.expert_counts[l];
        ++ref.rows;
      }
    }
  return ref;
}

// The k-ordered sum of one token: acc = +0; acc <- acc + w·y (product rounded to Acc, then
// added); returned unrounded.
template <class Acc>
inline void k_ordered_sum(const std::vector<const unsigned char*>& rows, const float* w, DType in,
                          int64_t hidden, Acc* acc) {
  for (int64_t h = 0; h < hidden; ++h) acc[h] = Acc(0);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (rows[k] == nullptr) continue;
    for (int64_t h = 0; h < hidden; ++h) {
      const Acc y = static_cast<Acc>(load(rows[k], in, static_cast<std::size_t>(h)));
      if (w == nullptr) {
        acc[h] = acc[h] + y;
      } else {
        const Acc p = static_cast<Acc>(w[k]) * y;
        acc[h] = acc[h] + p;
      }
    }
  }
}

// Rank r's combine output for its routing, given every owner's rows y (R_q rows of `in`; rank
// r's own at hand): the rows travel back with MPI_Alltoallv, the sum is a plain k-ordered loop.
// ref: rank r's dispatch reference of the same routing (its recv_counts).
inline Bytes reference_combine(const Bytes& y, DType in, DType out, int64_t hidden,
                               const Routing& rt, const DispatchRef& ref, int64_t E, int64_t K,
                               bool weighted) {
  const int W = world_size();
  const int64_t L = E / W;
  const std::size_t row = static_cast<std::size_t>(hidden) * dtype_size(in);
  // Owner side: rows of source s are, per local expert l, a run in y; send them in l order.
  std::vector<int64_t> send_splits(W, 0), recv_splits(W, 0);
  Bytes send;
  for (int s = 0; s < W; ++s)
    for (int64_t l = 0; l < L; ++l) {
      int64_t at = 0;  // dest row of (l, s)
      for (int64_t l2 = 0; l2 < l; ++l2)
        for (int s2 = 0; s2 < W; ++s2) at += ref.recv_counts[s2 * L + l2];
      for (int s2 = 0; s2 < s; ++s2) at += ref.recv_counts[s2 * L + l];
      const int64_t n = ref.recv_counts[s * L + l];
      send.insert(send.end(), y.begin() + at * row, y.begin() + (at + n) * row);
      send_splits[s] += n;
    }
  std::vector<int64_t> c(static_cast<std::size_t>(E), 0);
  for (int32_t e : rt.ids)
    if (e >= 0) ++c[e];
  for (int q = 0; q < W; ++q)
    for (int64_t l = 0; l < L; ++l) recv_splits[q] += c[q * L + l];
  const Bytes back = mpi_alltoallv(send, send_splits, recv_splits, row);
  // Source side: the chunk of owner q holds our slots of q's experts in (e, t, k) order.
  std::vector<const unsigned char*> slot(rt.ids.size(), nullptr);
  int64_t at = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t t = 0; t < rt.T; ++t)
      for (int64_t k = 0; k < K; ++k)
        if (rt.ids[t * K + k] == e) slot[t * K + k] = back.data() + (at++) * row;
  std::vector<double> result(static_cast<std::size_t>(rt.T * hidden));
  std::vector<double> accd(static_cast<std::size_t>(hidden));
  std::vector<float> accf(static_cast<std::size_t>(hidden));
  for (int64_t t = 0; t < rt.T; ++t) {
    std::vector<const unsigned char*> rows(slot.begin() + t * K, slot.begin() + (t + 1) * K);
    const float* w = weighted ? rt.weights.data() + t * K : nullptr;
    if (in == DType::kFloat64) {
      k_ordered_sum<double>(rows, w, in, hidden, accd.data());
      for (int64_t h = 0; h < hidden; ++h) result[t * hidden + h] = accd[h];
    } else {
      k_ordered_sum<float>(rows, w, in, hidden, accf.data());
      for (int64_t h = 0; h < hidden; ++h) result[t * hidden + h] = accf[h];
    }
  }
  return narrow(result, out);  // f32 sums are exact in double; narrowing rounds once
}

}  // namespace fluxcpp::test
