// The unfused references of the tensor-parallel MoE ops (ag_scatter_grouped_gemm,
// grouped_gemm_gather_rs): routings (moe_layout's stable scatter_index or a non-stable
// permutation of it), and for layer 0 MPI_Allgather + a plain gather loop + one cblas GEMM per
// expert; for layer 1 one cblas GEMM per expert + the weighted topk sum in API.md's order +
// MPI_Reduce_scatter_block. Header-only; builds on test_data.hpp and gemm_reference.hpp.
#pragma once

#include <cblas.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {

enum class RouteKind { kRandom, kSkewed, kEmptyExperts };

inline const char* route_kind_name(RouteKind k) {
  switch (k) {
    case RouteKind::kRandom: return "random";
    case RouteKind::kSkewed: return "skewed";
    case RouteKind::kEmptyExperts: return "empty_experts";
  }
  return "?";
}

// One routing, identical on every rank (built from a seed that does not depend on the rank).
struct Routing {
  int64_t T = 0, K = 0, E = 0;
  std::vector<int32_t> ids;      // [T, K]
  std::vector<int64_t> splits;   // [E]
  std::vector<int32_t> scatter;  // [T, K]
  std::vector<float> weights;    // [T, K]
  std::vector<int32_t> slot_of;  // [M]: the slot t·K + k of row j
  int64_t M = 0;
};

// random: ids uniform; skewed: about 70 % of the slots go to expert E/2; empty experts: experts
// 0, E-1 and every third get nothing. About 1 slot in 16 is unrouted (-1). stable: moe_layout's
// scatter_index; otherwise the rows of each expert are shuffled (a valid non-stable layout).
inline Routing make_routing(int64_t T, int64_t K, int64_t E, RouteKind kind, bool stable,
                            uint64_t seed) {
  Routing r;
  r.T = T, r.K = K, r.E = E;
  r.ids.resize(static_cast<std::size_t>(T * K));
  r.weights.resize(r.ids.size());
  uint64_t x = seed;
  for (auto& id : r.ids) {
    const uint64_t v = splitmix(x);
    int64_t e = static_cast<int64_t>(v % static_cast<uint64_t>(E));
    if (kind == RouteKind::kSkewed && (v >> 32) % 10 < 7) e = E / 2;
    if (kind == RouteKind::kEmptyExperts && E > 3)
      while (e == 0 || e == E - 1 || e % 3 == 0) e = (e + 1) % E;
    id = (v >> 40) % 16 == 0 ? -1 : static_cast<int32_t>(e);
  }
  for (auto& w : r.weights) w = static_cast<float>(splitmix(x) % 1000003) / 1000003.0f + 0.01f;
  const MoeLayout lay = moe_layout(r.ids.data(), T, K, E, 1);
  r.splits = lay.expert_counts;
  r.scatter = lay.scatter_index;
  for (int64_t s : r.splits) r.M += s;
  r.slot_of.assign(static_cast<std::size_t>(r.M), -1);
  for (int64_t i = 0; i < T * K; ++i)
    if (r.scatter[i] >= 0) r.slot_of[r.scatter[i]] = static_cast<int32_t>(i);
  if (!stable) {
    int64_t p = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t j = r.splits[e] - 1; j > 0; --j)  // Fisher-Yates within the expert's rows
        std::swap(r.slot_of[p + j], r.slot_of[p + static_cast<int64_t>(splitmix(x) % (j + 1))]);
      p += r.splits[e];
    }
    for (int64_t j = 0; j < r.M; ++j) r.scatter[r.slot_of[j]] = static_cast<int32_t>(j);
  }
  return r;
}

// The rank layout of the ops: this rank's first row b and row count M_r, and its expert range.
struct TpPlace {
  int64_t L = 0, q = 0, e0 = 0, b = 0, rows = 0;
};
inline TpPlace tp_place(const Routing& r, int64_t ep, int W, int rank) {
  TpPlace p;
  p.L = r.E / ep;
  p.q = rank / (W / ep);
  p.e0 = p.q * p.L;
  for (int64_t e = 0; e < p.e0; ++e) p.b += r.splits[e];
  for (int64_t l = 0; l < p.L; ++l) p.rows += r.splits[p.e0 + l];
  return p;
}

// C[rows, n] = A[rows, k] · W^T (W [n, k], or [k, n] when transposed), in double with cblas.
inline void dgemm_rows(const double* a, int64_t rows, const double* w, int64_t n, int64_t k,
                       bool trans, double* c) {
  if (rows == 0) return;
  cblas_dgemm(CblasRowMajor, CblasNoTrans, trans ? CblasNoTrans : CblasTrans,
              static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k), 1.0, a,
              static_cast<int>(k), w, static_cast<int>(trans ? n : k), 0.0, c, static_cast<int>(n));
}

// The local experts' GEMMs in double: a [pl.rows, k] holds r.splits rows per local expert, in
// expert order; w [pl.L, n, k] (each slab [k, n] when transposed). Returns the values [pl.rows, n]
// and their magnitudes (the same GEMMs of |a| and |w|), each expert's rows scaled by scale[l]
// (by 1 when scale is empty).
inline std::pair<std::vector<double>, std::vector<double>> expert_gemms(
    const Problem& p, const Routing& r, const TpPlace& pl, const std::vector<double>& a,
    const std::vector<double>& w, int64_t n, int64_t k, const std::vector<float>& scale = {}) {
  std::vector<double> aa(a), wa(w);
  for (auto& v : aa) v = std::fabs(v);
  for (auto& v : wa) v = std::fabs(v);
  std::vector<double> c(static_cast<std::size_t>(pl.rows * n)), ca(c.size());
  int64_t row = 0;
  for (int64_t l = 0; l < pl.L; ++l) {
    const int64_t rows = r.splits[pl.e0 + l];
    const std::size_t wo = static_cast<std::size_t>(l * n * k);
    dgemm_rows(a.data() + row * k, rows, w.data() + wo, n, k, p.transpose_weight,
               c.data() + row * n);
    dgemm_rows(aa.data() + row * k, rows, wa.data() + wo, n, k, p.transpose_weight,
               ca.data() + row * n);
    const double s = scale.empty() ? 1.0 : scale[l];
    for (int64_t i = row * n; i < (row + rows) * n; ++i) {
      c[i] *= s;
      ca[i] *= std::fabs(s);
    }
    row += rows;
  }
  return {c, ca};
}

// Layer 0: MPI_Allgather of the inputs, rows gathered by scatter_index in a plain loop, one cblas
// GEMM per local expert (in double, with |A|·|W| for the tolerance). input [T/W, hidden] in p.in;
// weight [L, n = ffn_shard, k = hidden] in p.in; scale [L] or empty.
inline Reference layer0_reference(const Problem& p, const Routing& r, const TpPlace& pl,
                                  const Bytes& input, const Bytes& weight,
                                  const std::vector<float>& scale, Bytes* gathered = nullptr) {
  OneBlasThread one;
  const int64_t H = p.k, F = p.n, per = r.T / world_size();
  const Bytes X = mpi_allgather(input, per, static_cast<std::size_t>(H) * dtype_size(p.in));
  if (gathered != nullptr) *gathered = X;
  std::vector<double> a(static_cast<std::size_t>(pl.rows * H));
  for (int64_t i = 0; i < pl.rows; ++i) {  // the gather loop
    const int64_t t = r.slot_of[pl.b + i] / r.K;
    for (int64_t h = 0; h < H; ++h)
      a[i * H + h] = load(X.data(), p.in, static_cast<std::size_t>(t * H + h));
  }
  const std::vector<double> w = widen_f64(weight, p.in, static_cast<std::size_t>(pl.L * F * H));
  const auto [c, ca] = expert_gemms(p, r, pl, a, w, F, H, scale);
  Reference ref;
  ref.value = c;
  ref.tol.resize(c.size());
  for (std::size_t i = 0; i < c.size(); ++i)
    ref.tol[i] = gemm_tolerance(p.in, p.out, H, ca[i], c[i]);
  return ref;
}

// Layer 1 in the accumulator type A (float for f32 and bf16 inputs, double for f64), following
// API.md's order exactly: Y = one cblas GEMM per local expert (never rounded), per token and
// destination rank part = +0, part <- part + w·Y in k order (product rounded, then added), the
// parts exchanged with MPI_Alltoall and summed in source-rank order from +0, rounded once.
// Returns this rank's output block [T/W, H] in p.out.
template <typename A>
Bytes layer1_contract_order(const Problem& p, const Routing& r, const TpPlace& pl,
                            const Bytes& input, const Bytes& weight, bool weighted) {
  const int W = world_size(), rank = world_rank();
  const int64_t H = p.n, F = p.k, per = r.T / W;
  std::vector<A> a(static_cast<std::size_t>(pl.rows * F));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<A>(load(input.data(), p.in, i));
  std::vector<A> w(static_cast<std::size_t>(pl.L * H * F));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<A>(load(weight.data(), p.in, i));
  std::vector<A> y(static_cast<std::size_t>(pl.rows * H));
  int64_t row = 0;
  for (int64_t l = 0; l < pl.L; ++l) {
    const int64_t n = r.splits[pl.e0 + l];
    if (n > 0) {
      const auto tb = p.transpose_weight ? CblasNoTrans : CblasTrans;
      const int ldb = static_cast<int>(p.transpose_weight ? H : F);
      if constexpr (std::is_same_v<A, double>)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, static_cast<int>(n), static_cast<int>(H),
                    static_cast<int>(F), 1.0, a.data() + row * F, static_cast<int>(F),
                    w.data() + l * H * F, ldb, 0.0, y.data() + row * H, static_cast<int>(H));
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, static_cast<int>(n), static_cast<int>(H),
                    static_cast<int>(F), 1.0f, a.data() + row * F, static_cast<int>(F),
                    w.data() + l * H * F, ldb, 0.0f, y.data() + row * H, static_cast<int>(H));
    }
    row += n;
  }
  std::vector<A> parts(static_cast<std::size_t>(r.T * H), A(0));  // [W][per, H], +0
  for (int64_t t = 0; t < r.T; ++t)
    for (int64_t k = 0; k < r.K; ++k) {
      const int64_t j = r.scatter[t * r.K + k];
      if (j < pl.b || j >= pl.b + pl.rows) continue;
      const A wt = weighted ? static_cast<A>(r.weights[t * r.K + k]) : A(1);
      for (int64_t h = 0; h < H; ++h) {
        volatile A prod = weighted ? wt * y[(j - pl.b) * H + h] : y[(j - pl.b) * H + h];
        parts[t * H + h] += prod;
      }
    }
  std::vector<A> got(parts.size());
  const int cnt = static_cast<int>(per * H * static_cast<int64_t>(sizeof(A)));
  MPI_Alltoall(parts.data(), cnt, MPI_BYTE, got.data(), cnt, MPI_BYTE, MPI_COMM_WORLD);
  std::vector<double> out(static_cast<std::size_t>(per * H));
  for (int64_t i = 0; i < per * H; ++i) {
    A acc = A(0);
    for (int s = 0; s < W; ++s) acc += got[s * per * H + i];
    out[i] = static_cast<double>(acc);
  }
  (void)rank;
  return narrow(out, p.out);  // rounded once (f32 -> bf16 directly: exact in double)
}

// Layer 1 in double with a tolerance: one cblas GEMM per expert, the weighted topk sum, and
// MPI_Reduce_scatter_block over the world (of the values and of their magnitudes).
inline Reference layer1_reference(const Problem& p, const Routing& r, const TpPlace& pl,
                                  const Bytes& input, const Bytes& weight, bool weighted) {
  OneBlasThread one;
  const int W = world_size();
  const int64_t H = p.n, F = p.k, per = r.T / W;
  const std::vector<double> a = widen_f64(input, p.in, static_cast<std::size_t>(pl.rows * F));
  const std::vector<double> w = widen_f64(weight, p.in, static_cast<std::size_t>(pl.L * H * F));
  const auto [y, ya] = expert_gemms(p, r, pl, a, w, H, F);
  std::vector<double> parts(static_cast<std::size_t>(2 * r.T * H), 0.0);  // values, magnitudes
  for (int64_t t = 0; t < r.T; ++t)
    for (int64_t k = 0; k < r.K; ++k) {
      const int64_t j = r.scatter[t * r.K + k];
      if (j < pl.b || j >= pl.b + pl.rows) continue;
      const double wt = weighted ? r.weights[t * r.K + k] : 1.0;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t d = t / per, i = (t % per) * H + h;  // block d: [values | magnitudes]
        parts[d * 2 * per * H + i] += wt * y[(j - pl.b) * H + h];
        parts[d * 2 * per * H + per * H + i] += std::fabs(wt) * ya[(j - pl.b) * H + h];
      }
    }
  std::vector<double> mine(static_cast<std::size_t>(2 * per * H));
  MPI_Reduce_scatter_block(parts.data(), mine.data(), static_cast<int>(2 * per * H), MPI_DOUBLE,
                           MPI_SUM, MPI_COMM_WORLD);
  Reference ref;
  ref.value.assign(mine.begin(), mine.begin() + per * H);
  ref.tol.resize(ref.value.size());
  for (std::size_t i = 0; i < ref.value.size(); ++i)
    ref.tol[i] = gemm_tolerance(p.in, p.out, F + r.K * W, mine[per * H + i], ref.value[i]);
  return ref;
}

// ---- test cases ------------------------------------------------------------------------------

// One case of a TP MoE op test: the GEMM problem (layer 0: n = ffn_shard, k = hidden; layer 1:
// n = hidden, k = ffn_shard), the routing shape and kind, and the data.
struct Case {
  Problem p;
  int64_t T, K, E, ep;
  RouteKind kind;
  bool stable, exact;
  bool scale;  // layer 0: a per-expert scale; layer 1: routing weights (else NULL)
};

inline std::string describe(const Case& c) {
  return describe(c.p) + " T=" + std::to_string(c.T) + " K=" + std::to_string(c.K) +
         " E=" + std::to_string(c.E) + " ep=" + std::to_string(c.ep) + " " +
         route_kind_name(c.kind) + (c.stable ? " stable" : " shuffled") +
         (c.exact ? " exact" : " random") + (c.scale ? " scale" : "");
}

// Legal at this world size (API.md: E % ep == 0 and W % ep == 0); prints why not.
inline bool legal(int64_t E, int64_t ep, const std::string& what) {
  const int W = world_size();
  if (E % ep == 0 && W % ep == 0) return true;
  if (world_rank() == 0)
    std::printf("[ skipped  ] %s: illegal at W=%d (E %% ep = %lld, W %% ep = %lld)\n", what.c_str(),
                W, static_cast<long long>(E % ep), static_cast<long long>(W % ep));
  return false;
}

// layer1: the problem's n is hidden and k is ffn_shard (layer 0: the other way round).
inline MoeTpOptions options_of(const Case& c, int64_t max_tokens, bool layer1 = false) {
  MoeTpOptions o;
  o.max_tokens = max_tokens;
  o.hidden = layer1 ? c.p.n : c.p.k;
  o.ffn_shard = layer1 ? c.p.k : c.p.n;
  o.topk = c.K;
  o.num_experts = c.E;
  o.ep_size = c.ep;
  o.input_dtype = c.p.in;
  o.output_dtype = c.p.out;
  o.transpose_weight = c.p.transpose_weight;
  return o;
}

}  // namespace fluxcpp::test
