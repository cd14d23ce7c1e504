// The unfused references of the Ulysses pair, GemmA2aTranspose and A2aTransposeGemm, shared by the
// files of fluxcpp_ulysses_test (tests/ops/ulysses_*_test.cpp): plain cblas GEMMs (+ bias) and
// MPI_Alltoall, the blocks placed with the index formulas of API.md (gemm_a2a_transpose,
// a2a_transpose_gemm); one checked forward of each op; and the fixtures and cases whose tests
// are spread over several of those files (each suite is instantiated once, in ulysses_test.cpp).
//
// Header-only; builds on gemm_reference.hpp and test_data.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {

inline constexpr const char* kGat = "gemm_a2a_transpose";
inline constexpr const char* kAtg = "a2a_transpose_gemm";

// ---- the unfused reference -----------------------------------------------------------------

inline std::size_t sz(int64_t v) {
  return static_cast<std::size_t>(v);
}

// a [m, k], weight [n, k] in `in`; bias [n] in `out` or null: a · weightᵀ + bias, with
// reference()'s tolerance.
inline Reference gemm_reference(DType in, DType out, int64_t m, int64_t n, int64_t k,
                                const Bytes& a, const Bytes& weight, const Bytes* bias) {
  return reference(Problem{in, out, n, k, false}, m, a, weight, bias);
}

// Runs fn expecting kInvalidArgument from op `op` (a name such as kGat), its message naming the
// op and every needle.
template <typename F>
void expect_invalid(const char* op, F&& fn, std::vector<std::string> needles,
                    const std::string& what) {
  needles.insert(needles.begin(), op);
  expect_error(std::forward<F>(fn), Errc::kInvalidArgument, needles, std::string(op) + " " + what);
}

// The shape of one forward: W, bs, the global seq, and the op's heads.
struct Dims {
  int W = 1;
  int64_t bs = 0, seq = 0, nheads = 0, head_dim = 0;
  int64_t seq_w() const { return seq / W; }       // this rank's sequence slice
  int64_t heads_w() const { return nheads / W; }  // this rank's heads
  int64_t width() const { return nheads * head_dim; }
  int64_t block() const { return heads_w() * head_dim; }  // one head group's columns
};

inline std::string dims_name(const Dims& d) {
  return "W=" + std::to_string(d.W) + " bs=" + std::to_string(d.bs) +
         " seq=" + std::to_string(d.seq) + " nheads=" + std::to_string(d.nheads) +
         " head_dim=" + std::to_string(d.head_dim);
}

// The Dims of a call of either op (its options carry nheads and head_dim) on MPI_COMM_WORLD.
template <typename Options>
Dims dims_of(const Options& o, int64_t bs, int64_t seq) {
  return Dims{world_size(), bs, seq, o.nheads, o.head_dim};
}

// "<op> <in>-><out> W=.. bs=.. seq=.. nheads=.. head_dim=..", the start of a case's name.
template <typename Options>
std::string op_dims_name(const char* op, const Options& o, const Dims& d) {
  return std::string(op) + " " + dtype_name(o.input_dtype) + "->" + dtype_name(o.output_dtype) +
         " " + dims_name(d);
}

// ---- GemmA2aTranspose reference ------------------------------------------------------------

// This rank's expected output [bs, nheads/W, seq, head_dim]: y_s = input_s · weight_sᵀ + bias_s
// on every rank s (values and tolerances in f64), MPI_Alltoall of the per-destination column
// blocks, then output_r[b][h][t][d] = y_{t/(seq/W)}[b][t%(seq/W)][(r·nheads/W + h)·head_dim + d].
// Collective (even with bs == 0 nothing is skipped, so every rank calls MPI_Alltoall).
inline Reference gat_reference(const GemmA2aTransposeOptions& o, const Dims& d, const Bytes& input,
                               const Bytes& weight, const Bytes* bias) {
  const int W = d.W;
  const int64_t rows = d.bs * d.seq_w(), N = d.width(), blk = d.block(), hd = d.head_dim;
  Reference y =
      gemm_reference(o.input_dtype, o.output_dtype, rows, N, o.hidden, input, weight, bias);
  // Per destination t: [rows, blk] values, then [rows, blk] tolerances.
  const std::size_t cnt = sz(2 * rows * blk);
  std::vector<double> send(cnt * W), recv(cnt * W);
  for (int t = 0; t < W; ++t)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < blk; ++c) {
        const std::size_t from = sz(i * N + t * blk + c);
        send[t * cnt + sz(i * blk + c)] = y.value[from];
        send[t * cnt + sz(rows * blk + i * blk + c)] = y.tol[from];
      }
  MPI_Alltoall(send.data(), static_cast<int>(cnt), MPI_DOUBLE, recv.data(), static_cast<int>(cnt),
               MPI_DOUBLE, MPI_COMM_WORLD);
  Reference out;
  const std::size_t count = sz(d.bs * d.heads_w() * d.seq * hd);
  out.value.assign(count, 0.0);
  out.tol.assign(count, 0.0);
  for (int64_t b = 0; b < d.bs; ++b)
    for (int64_t h = 0; h < d.heads_w(); ++h)
      for (int64_t t = 0; t < d.seq; ++t)
        for (int64_t dd = 0; dd < hd; ++dd) {
          const int64_t s = t / d.seq_w(), tl = t % d.seq_w();
          const std::size_t src = sz(s) * cnt + sz((b * d.seq_w() + tl) * blk + h * hd + dd);
          const std::size_t dst = sz(((b * d.heads_w() + h) * d.seq + t) * hd + dd);
          out.value[dst] = recv[src];
          out.tol[dst] = recv[src + sz(rows * blk)];
        }
  return out;
}

// "output[b][h][t][d]" of flat index i of a [bs, nheads/W, seq, head_dim] tensor.
inline std::function<std::string(std::size_t)> gat_where(const Dims& d) {
  return [d](std::size_t i) {
    const int64_t x = static_cast<int64_t>(i);
    const int64_t dd = x % d.head_dim, t = x / d.head_dim % d.seq,
                  h = x / (d.head_dim * d.seq) % d.heads_w(),
                  b = x / (d.head_dim * d.seq * d.heads_w());
    return "output[b=" + std::to_string(b) + "][h=" + std::to_string(h) +
           "][t=" + std::to_string(t) + "][d=" + std::to_string(dd) + "]";
  };
}

// The tensors of one forward of either op: input, weight, bias.
struct OpData {
  Bytes input, weight, bias;
};
using GatData = OpData;
using AtgData = OpData;

// Different on every rank and every call (weights and biases included).
inline GatData gat_data(const GemmA2aTransposeOptions& o, const Dims& d, int call) {
  const int r = world_rank();
  GatData g;
  g.input = random_tensor(o.input_dtype, std::max<std::size_t>(sz(d.bs * d.seq_w() * o.hidden), 1),
                          seed_of(r, call, 11));
  g.weight = random_tensor(o.input_dtype, sz(d.width() * o.hidden), seed_of(r, call, 12));
  g.bias = random_tensor(o.output_dtype, sz(d.width()), seed_of(r, call, 13));
  return g;
}

inline std::size_t gat_out_count(const Dims& d) {
  return sz(d.bs * d.heads_w() * d.seq * d.head_dim);
}

inline GemmA2aTransposeOptions gat_options(DType in, DType out, int64_t max_bs, int64_t max_seq,
                                           int64_t hidden, int64_t nheads, int64_t head_dim) {
  return {max_bs, max_seq, hidden, nheads, head_dim, in, out};  // the fields in their order
}

inline std::string gat_name(const GemmA2aTransposeOptions& o, const Dims& d) {
  return op_dims_name(kGat, o, d) + " hidden=" + std::to_string(o.hidden);
}

// One forward of `op`, checked against the reference. Collective. Returns false (on this rank)
// if anything failed. With bs == 0 the output buffer must come back untouched. The output
// (when `result` is given) is copied there.
inline bool check_gat_forward(GemmA2aTranspose& op, int64_t bs, int64_t seq, const GatData& g,
                              bool with_bias, const std::string& what, Bytes* result = nullptr) {
  const GemmA2aTransposeOptions& o = op.options();
  const Dims d = dims_of(o, bs, seq);
  const std::size_t count = gat_out_count(d), esz = dtype_size(o.output_dtype);
  Reference ref = gat_reference(o, d, g.input, g.weight, with_bias ? &g.bias : nullptr);
  Bytes out = poisoned_output(o.output_dtype, count);
  if (!expect_no_throw(
          [&] {
            op.forward(g.input.data(), bs, seq, g.weight.data(),
                       with_bias ? g.bias.data() : nullptr, out.data());
          },
          what + " forward"))
    return false;
  bool ok = expect_untouched(out, count * esz, what);
  if (count > 0 && expect_close_at(ref, out, o.output_dtype, count, what, gat_where(d)) != 0)
    ok = false;
  if (result != nullptr) result->assign(out.begin(), out.begin() + count * esz);
  return ok;
}

// ---- A2aTransposeGemm reference ------------------------------------------------------------

// The a2a_output this rank must receive, [bs, seq/W, nheads·head_dim] in the input dtype:
// a2a_output_r[b][t][(s·nheads/W + h)·head_dim + d] = input_s[b][h][r·seq/W + t][d], built with
// MPI_Alltoall. Collective.
inline Bytes atg_a2a_reference(DType in, const Dims& d, const Bytes& input) {
  const int W = d.W;
  const std::size_t esz = dtype_size(in), run = sz(d.head_dim) * esz;
  const int64_t hw = d.heads_w(), sw = d.seq_w();
  const std::size_t cnt = sz(d.bs * hw * sw) * run;  // bytes per destination
  Bytes send(std::max<std::size_t>(cnt * W, 1)), recv(std::max<std::size_t>(cnt * W, 1));
  for (int r = 0; r < W; ++r)
    for (int64_t b = 0; b < d.bs; ++b)
      for (int64_t h = 0; h < hw; ++h)
        for (int64_t t = 0; t < sw; ++t)
          std::memcpy(send.data() + r * cnt + sz((b * hw + h) * sw + t) * run,
                      input.data() + sz((b * hw + h) * d.seq + r * sw + t) * run, run);
  MPI_Alltoall(send.data(), static_cast<int>(cnt), MPI_BYTE, recv.data(), static_cast<int>(cnt),
               MPI_BYTE, MPI_COMM_WORLD);
  Bytes a2a(sz(d.bs * sw * d.width()) * esz);
  for (int s = 0; s < W; ++s)
    for (int64_t b = 0; b < d.bs; ++b)
      for (int64_t h = 0; h < hw; ++h)
        for (int64_t t = 0; t < sw; ++t)
          std::memcpy(a2a.data() + sz((b * sw + t) * d.width() + (s * hw + h) * d.head_dim) * esz,
                      recv.data() + s * cnt + sz((b * hw + h) * sw + t) * run, run);
  return a2a;
}

// "output[b][t][j]" of flat index i of a [bs, seq/W, n] tensor.
inline std::function<std::string(std::size_t)> atg_where(const Dims& d, int64_t n) {
  return [d, n](std::size_t i) {
    const int64_t x = static_cast<int64_t>(i);
    const int64_t j = x % n, t = x / n % d.seq_w(), b = x / (n * d.seq_w());
    return "output[b=" + std::to_string(b) + "][t=" + std::to_string(t) +
           "][j=" + std::to_string(j) + "]";
  };
}

// Bitwise comparison of a2a_output [bs, seq/W, width] with the reference; reports [b][t][c].
inline bool expect_same_a2a(const Bytes& want, const Bytes& got, DType t, const Dims& d,
                            const std::string& what) {
  const auto where = [d](std::size_t i) {
    const int64_t x = static_cast<int64_t>(i), c = x % d.width(), tt = x / d.width() % d.seq_w(),
                  b = x / (d.width() * d.seq_w());
    const int64_t s = c / d.block(), h = c % d.block() / d.head_dim, dd = c % d.head_dim;
    std::ostringstream os;
    os << "a2a_output[b=" << b << "][t=" << tt << "][col=" << c << " (from rank " << s << ", head "
       << h << ", d " << dd << ")]";
    return os.str();
  };
  return expect_same_elements(want, got, t, where, what, "a2a_output");
}

inline AtgData atg_data(const A2aTransposeGemmOptions& o, const Dims& d, int call) {
  const int r = world_rank();
  AtgData g;
  g.input = random_tensor(o.input_dtype,
                          std::max<std::size_t>(sz(d.bs * d.heads_w() * d.seq * d.head_dim), 1),
                          seed_of(r, call, 21));
  g.weight = random_tensor(o.input_dtype, sz(o.n * d.width()), seed_of(r, call, 22));
  g.bias = random_tensor(o.output_dtype, sz(o.n), seed_of(r, call, 23));
  return g;
}

inline A2aTransposeGemmOptions atg_options(DType in, DType out, int64_t max_bs, int64_t max_seq,
                                           int64_t nheads, int64_t head_dim, int64_t n) {
  return {max_bs, max_seq, nheads, head_dim, n, in, out};  // the fields in their order
}

inline std::string atg_name(const A2aTransposeGemmOptions& o, const Dims& d) {
  return op_dims_name(kAtg, o, d) + " n=" + std::to_string(o.n);
}

// a2a_output buffers start as 0xEE bytes (outputs: kPoison, all-ones).
inline constexpr unsigned char kA2aPoison = 0xEE;

// Bytes of a2a_output from `from` on are still kA2aPoison.
inline bool expect_a2a_untouched(const Bytes& a2a, std::size_t from, const std::string& what) {
  return expect_untouched(a2a, from, what, kA2aPoison, "a2a_output");
}

// One forward of `op`, checked against the reference: a2a_output bit for bit (when passed),
// output within tolerance. Collective. Returns false (on this rank) if anything failed. With
// bs == 0 both buffers must come back untouched. Results are copied out when asked for.
inline bool check_atg_forward(A2aTransposeGemm& op, int64_t bs, int64_t seq, const AtgData& g,
                              bool with_bias, bool with_a2a, const std::string& what,
                              Bytes* result = nullptr, Bytes* a2a_result = nullptr) {
  const A2aTransposeGemmOptions& o = op.options();
  const Dims d = dims_of(o, bs, seq);
  const std::size_t rows = sz(d.bs * d.seq_w());
  const std::size_t count = rows * sz(o.n), osz = dtype_size(o.output_dtype);
  const std::size_t a2a_bytes = rows * sz(d.width()) * dtype_size(o.input_dtype);
  Bytes a2a_ref = atg_a2a_reference(o.input_dtype, d, g.input);
  Bytes out = poisoned_output(o.output_dtype, count);
  Bytes a2a(a2a_bytes + kGuardElems * dtype_size(o.input_dtype), kA2aPoison);
  if (!expect_no_throw(
          [&] {
            op.forward(g.input.data(), bs, seq, g.weight.data(),
                       with_bias ? g.bias.data() : nullptr, out.data(),
                       with_a2a ? a2a.data() : nullptr);
          },
          what + " forward"))
    return false;
  bool ok = expect_untouched(out, count * osz, what);
  ok = expect_a2a_untouched(a2a, with_a2a ? a2a_bytes : 0, what) && ok;
  if (count == 0) return ok;
  if (with_a2a) ok = expect_same_a2a(a2a_ref, a2a, o.input_dtype, d, what) && ok;
  Reference ref = gemm_reference(o.input_dtype, o.output_dtype, static_cast<int64_t>(rows), o.n,
                                 d.width(), a2a_ref, g.weight, with_bias ? &g.bias : nullptr);
  if (expect_close_at(ref, out, o.output_dtype, count, what, atg_where(d, o.n)) != 0) ok = false;
  if (result != nullptr) result->assign(out.begin(), out.begin() + count * osz);
  if (a2a_result != nullptr && with_a2a) a2a_result->assign(a2a.begin(), a2a.begin() + a2a_bytes);
  return ok;
}

// ---- cases and fixtures shared by several files --------------------------------------------

// Sizes per rank; the global ones are seq = seq_w·W and nheads = heads_w·W.
struct UlyssesShape {
  const char* name;
  int64_t bs, seq_w, heads_w, head_dim, hidden, n;
};

inline const UlyssesShape kUlyssesShapes[] = {
    {"smallest", 1, 1, 1, 1, 1, 1},  // bs=1, seq=W, nheads=W, head_dim=1
    {"odd_hidden7", 3, 5, 3, 3, 7, 5},
    {"odd_hidden127", 3, 5, 3, 3, 127, 5},
    {"mid", 2, 64, 2, 32, 128, 96},
    // 768 exchanged rows per rank: a2a_transpose_gemm runs 3 row tiles (with copy offload, on
    // a comm stream beside the GEMM).
    {"tiled", 2, 384, 1, 4, 8, 16},
};

struct UlyssesCase {
  DType in, out;
  UlyssesShape shape;
};

inline std::string case_name(const UlyssesCase& c) {
  return std::string(dtype_name(c.in)) + "_" + dtype_name(c.out) + "_" + c.shape.name;
}

inline void PrintTo(const UlyssesCase& c, std::ostream* os) {
  *os << case_name(c);
}

// Every dtype pair with every shape.
inline std::vector<UlyssesCase> all_ulysses_cases() {
  std::vector<UlyssesCase> v;
  for (auto [in, out] : kPairs)
    for (const UlyssesShape& s : kUlyssesShapes) v.push_back({in, out, s});
  return v;
}

// Correctness over dtype pairs and shapes (both ops' files).
class UlyssesShapes : public MpiTest, public ::testing::WithParamInterface<UlyssesCase> {};

// Consecutive calls on one op (both ops' files): bs and seq (in units of W) of call i are
// kCycle[i % 6].
class UlyssesCalls : public MpiTest {};
inline const std::pair<int64_t, int64_t> kCycle[] = {{2, 4}, {1, 1}, {0, 2},
                                                     {2, 3}, {1, 4}, {2, 2}};

// The benchmark paths, gemm-only and comm-only, per dtype pair (both ops' files).
class UlyssesPaths : public MpiTest,
                     public ::testing::WithParamInterface<std::pair<DType, DType>> {};

}  // namespace fluxcpp::test
