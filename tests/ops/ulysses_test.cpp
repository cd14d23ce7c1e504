// GemmA2aTranspose and A2aTransposeGemm (Ulysses sequence parallelism) against the unfused
// references computed here: plain cblas GEMMs (+ bias) and MPI_Alltoall, the blocks placed with
// the index formulas of API.md (gemm_a2a_transpose, a2a_transpose_gemm).
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
namespace {

constexpr const char* kGat = "gemm_a2a_transpose";
constexpr const char* kAtg = "a2a_transpose_gemm";

// ---- the unfused reference -----------------------------------------------------------------

std::size_t sz(int64_t v) {
  return static_cast<std::size_t>(v);
}

// a [m, k], weight [n, k] in `in`; bias [n] in `out` or null: a · weightᵀ + bias, with
// reference()'s tolerance.
Reference gemm_reference(DType in, DType out, int64_t m, int64_t n, int64_t k, const Bytes& a,
                         const Bytes& weight, const Bytes* bias) {
  return reference(Problem{in, out, n, k, false}, m, a, weight, bias);
}

// Number of the first `count` elements of got (dtype t) outside the reference's tolerance; the
// first few are reported with rank, where(i) (the element's multi-index), expected and got.
int64_t expect_close_at(const Reference& ref, const Bytes& got, DType t, std::size_t count,
                        const std::string& what,
                        const std::function<std::string(std::size_t)>& where, int max_reports = 4) {
  int64_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double g = load(got.data(), t, i), e = ref.value[i];
    if (std::fabs(g - e) <= ref.tol[i]) continue;  // NaN fails here too
    if (bad < max_reports) {
      std::ostringstream os;
      os << std::setprecision(10) << what << ": rank " << world_rank() << " " << where(i)
         << ": expected " << e;
      if (t == DType::kBFloat16)
        os << " (bf16 " << bf16_to_float(float_to_bf16(static_cast<float>(e))) << ")";
      os << " ± " << ref.tol[i] << ", got " << g;
      ADD_FAILURE() << os.str();
    }
    ++bad;
  }
  if (bad > max_reports)
    ADD_FAILURE() << what << ": rank " << world_rank() << ": " << bad << " of " << count
                  << " elements out of tolerance";
  return bad;
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

std::string dims_name(const Dims& d) {
  return "W=" + std::to_string(d.W) + " bs=" + std::to_string(d.bs) +
         " seq=" + std::to_string(d.seq) + " nheads=" + std::to_string(d.nheads) +
         " head_dim=" + std::to_string(d.head_dim);
}

// ---- GemmA2aTranspose reference ------------------------------------------------------------

// This rank's expected output [bs, nheads/W, seq, head_dim]: y_s = input_s · weight_sᵀ + bias_s
// on every rank s (values and tolerances in f64), MPI_Alltoall of the per-destination column
// blocks, then output_r[b][h][t][d] = y_{t/(seq/W)}[b][t%(seq/W)][(r·nheads/W + h)·head_dim + d].
// Collective (even with bs == 0 nothing is skipped, so every rank calls MPI_Alltoall).
Reference gat_reference(const GemmA2aTransposeOptions& o, const Dims& d, const Bytes& input,
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
std::function<std::string(std::size_t)> gat_where(const Dims& d) {
  return [d](std::size_t i) {
    const int64_t x = static_cast<int64_t>(i);
    const int64_t dd = x % d.head_dim, t = x / d.head_dim % d.seq,
                  h = x / (d.head_dim * d.seq) % d.heads_w(),
                  b = x / (d.head_dim * d.seq * d.heads_w());
    return "output[b=" + std::to_string(b) + "][h=" + std::to_string(h) +
           "][t=" + std::to_string(t) + "][d=" + std::to_string(dd) + "]";
  };
}

struct GatData {
  Bytes input, weight, bias;
};

// Different on every rank and every call (weights and biases included).
GatData gat_data(const GemmA2aTransposeOptions& o, const Dims& d, int call) {
  const int r = world_rank();
  GatData g;
  g.input = random_tensor(o.input_dtype, std::max<std::size_t>(sz(d.bs * d.seq_w() * o.hidden), 1),
                          seed_of(r, call, 11));
  g.weight = random_tensor(o.input_dtype, sz(d.width() * o.hidden), seed_of(r, call, 12));
  g.bias = random_tensor(o.output_dtype, sz(d.width()), seed_of(r, call, 13));
  return g;
}

std::size_t gat_out_count(const Dims& d) {
  return sz(d.bs * d.heads_w() * d.seq * d.head_dim);
}

GemmA2aTransposeOptions gat_options(DType in, DType out, int64_t max_bs, int64_t max_seq,
                                    int64_t hidden, int64_t nheads, int64_t head_dim) {
  GemmA2aTransposeOptions o;
  o.max_bs = max_bs;
  o.max_seq = max_seq;
  o.hidden = hidden;
  o.nheads = nheads;
  o.head_dim = head_dim;
  o.input_dtype = in;
  o.output_dtype = out;
  return o;
}

Dims dims_of(const GemmA2aTransposeOptions& o, int64_t bs, int64_t seq) {
  return Dims{world_size(), bs, seq, o.nheads, o.head_dim};
}

std::string gat_name(const GemmA2aTransposeOptions& o, const Dims& d) {
  return std::string(kGat) + " " + dtype_name(o.input_dtype) + "->" + dtype_name(o.output_dtype) +
         " " + dims_name(d) + " hidden=" + std::to_string(o.hidden);
}

// One forward of `op`, checked against the reference. Collective. Returns false (on this rank)
// if anything failed. With bs == 0 the output buffer must come back untouched. The output
// (when `result` is given) is copied there.
bool check_gat_forward(GemmA2aTranspose& op, int64_t bs, int64_t seq, const GatData& g,
                       bool with_bias, const std::string& what, Bytes* result = nullptr) {
  const GemmA2aTransposeOptions& o = op.options();
  const Dims d = dims_of(o, bs, seq);
  const std::size_t count = gat_out_count(d), esz = dtype_size(o.output_dtype);
  Reference ref = gat_reference(o, d, g.input, g.weight, with_bias ? &g.bias : nullptr);
  Bytes out = poisoned_output(o.output_dtype, count);
  try {
    op.forward(g.input.data(), bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
               out.data());
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": forward threw: " << e.what();
    return false;
  }
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
Bytes atg_a2a_reference(DType in, const Dims& d, const Bytes& input) {
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
std::function<std::string(std::size_t)> atg_where(const Dims& d, int64_t n) {
  return [d, n](std::size_t i) {
    const int64_t x = static_cast<int64_t>(i);
    const int64_t j = x % n, t = x / n % d.seq_w(), b = x / (n * d.seq_w());
    return "output[b=" + std::to_string(b) + "][t=" + std::to_string(t) +
           "][j=" + std::to_string(j) + "]";
  };
}

// Bitwise comparison of a2a_output [bs, seq/W, width] with the reference; reports [b][t][c].
bool expect_same_a2a(const Bytes& want, const Bytes& got, DType t, const Dims& d,
                     const std::string& what) {
  const std::size_t esz = dtype_size(t), count = want.size() / esz;
  if (got.size() < want.size()) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": a2a_output too small";
    return false;
  }
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size()) == 0) return true;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(want.data() + i * esz, got.data() + i * esz, esz) == 0) continue;
    if (bad < 4) {
      const int64_t x = static_cast<int64_t>(i), c = x % d.width(), tt = x / d.width() % d.seq_w(),
                    b = x / (d.width() * d.seq_w());
      const int64_t s = c / d.block(), h = c % d.block() / d.head_dim, dd = c % d.head_dim;
      std::ostringstream os;
      os << std::setprecision(17) << what << ": rank " << world_rank() << " a2a_output[b=" << b
         << "][t=" << tt << "][col=" << c << " (from rank " << s << ", head " << h << ", d " << dd
         << ")]: expected " << load(want.data(), t, i) << " (" << hex_of(want.data(), t, i)
         << "), got " << load(got.data(), t, i) << " (" << hex_of(got.data(), t, i) << ")";
      ADD_FAILURE() << os.str();
    }
    ++bad;
  }
  if (bad > 4)
    ADD_FAILURE() << what << ": rank " << world_rank() << ": " << bad << " of " << count
                  << " a2a_output elements differ";
  return false;
}

struct AtgData {
  Bytes input, weight, bias;
};

AtgData atg_data(const A2aTransposeGemmOptions& o, const Dims& d, int call) {
  const int r = world_rank();
  AtgData g;
  g.input = random_tensor(o.input_dtype,
                          std::max<std::size_t>(sz(d.bs * d.heads_w() * d.seq * d.head_dim), 1),
                          seed_of(r, call, 21));
  g.weight = random_tensor(o.input_dtype, sz(o.n * d.width()), seed_of(r, call, 22));
  g.bias = random_tensor(o.output_dtype, sz(o.n), seed_of(r, call, 23));
  return g;
}

A2aTransposeGemmOptions atg_options(DType in, DType out, int64_t max_bs, int64_t max_seq,
                                    int64_t nheads, int64_t head_dim, int64_t n) {
  A2aTransposeGemmOptions o;
  o.max_bs = max_bs;
  o.max_seq = max_seq;
  o.nheads = nheads;
  o.head_dim = head_dim;
  o.n = n;
  o.input_dtype = in;
  o.output_dtype = out;
  return o;
}

Dims dims_of(const A2aTransposeGemmOptions& o, int64_t bs, int64_t seq) {
  return Dims{world_size(), bs, seq, o.nheads, o.head_dim};
}

std::string atg_name(const A2aTransposeGemmOptions& o, const Dims& d) {
  return std::string(kAtg) + " " + dtype_name(o.input_dtype) + "->" + dtype_name(o.output_dtype) +
         " " + dims_name(d) + " n=" + std::to_string(o.n);
}

// a2a_output buffers start as 0xEE bytes (outputs: kPoison, all-ones).
constexpr unsigned char kA2aPoison = 0xEE;

// One forward of `op`, checked against the reference: a2a_output bit for bit (when passed),
// output within tolerance. Collective. Returns false (on this rank) if anything failed. With
// bs == 0 both buffers must come back untouched. Results are copied out when asked for.
bool check_atg_forward(A2aTransposeGemm& op, int64_t bs, int64_t seq, const AtgData& g,
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
  try {
    op.forward(g.input.data(), bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
               out.data(), with_a2a ? a2a.data() : nullptr);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": forward threw: " << e.what();
    return false;
  }
  bool ok = expect_untouched(out, count * osz, what);
  for (std::size_t i = with_a2a ? a2a_bytes : 0; i < a2a.size(); ++i)
    if (a2a[i] != kA2aPoison) {
      ADD_FAILURE() << what << ": rank " << world_rank() << ": a2a_output written at byte " << i
                    << " (beyond its " << (with_a2a ? a2a_bytes : 0) << " bytes)";
      ok = false;
      break;
    }
  if (count == 0) return ok;
  if (with_a2a) ok = expect_same_a2a(a2a_ref, a2a, o.input_dtype, d, what) && ok;
  Reference ref = gemm_reference(o.input_dtype, o.output_dtype, static_cast<int64_t>(rows), o.n,
                                 d.width(), a2a_ref, g.weight, with_bias ? &g.bias : nullptr);
  if (expect_close_at(ref, out, o.output_dtype, count, what, atg_where(d, o.n)) != 0) ok = false;
  if (result != nullptr) result->assign(out.begin(), out.begin() + count * osz);
  if (a2a_result != nullptr && with_a2a) a2a_result->assign(a2a.begin(), a2a.begin() + a2a_bytes);
  return ok;
}

// ---- 1. correctness over dtype pairs and shapes, bias and a2a_output on and off -------------

// Sizes per rank; the global ones are seq = seq_w·W and nheads = heads_w·W.
struct Shape {
  const char* name;
  int64_t bs, seq_w, heads_w, head_dim, hidden, n;
};

const Shape kShapes[] = {
    {"smallest", 1, 1, 1, 1, 1, 1},  // bs=1, seq=W, nheads=W, head_dim=1
    {"odd_hidden7", 3, 5, 3, 3, 7, 5},
    {"odd_hidden127", 3, 5, 3, 3, 127, 5},
    {"mid", 2, 64, 2, 32, 128, 96},
    // 768 exchanged rows per rank: a2a_transpose_gemm runs 3 row tiles (with copy offload, on
    // a comm stream beside the GEMM).
    {"tiled", 2, 384, 1, 4, 8, 16},
};

struct Case {
  DType in, out;
  Shape shape;
};

std::string case_name(const Case& c) {
  return std::string(dtype_name(c.in)) + "_" + dtype_name(c.out) + "_" + c.shape.name;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << case_name(c);
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (auto [in, out] : kPairs)
    for (const Shape& s : kShapes) v.push_back({in, out, s});
  return v;
}

class UlyssesShapes : public MpiTest, public ::testing::WithParamInterface<Case> {};

// The op created with exactly the shape's maxima; with and without bias, fresh data each call.
TEST_P(UlyssesShapes, GemmA2aTransposeMatchesGemmThenAlltoall) {
  const Case c = GetParam();
  const Shape& s = c.shape;
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t seq = s.seq_w * W;
  GemmA2aTranspose op(ctx,
                      gat_options(c.in, c.out, s.bs, seq, s.hidden, s.heads_w * W, s.head_dim));
  int call = 0;
  for (bool with_bias : {true, false}) {
    const Dims d = dims_of(op.options(), s.bs, seq);
    GatData g = gat_data(op.options(), d, call);
    check_gat_forward(op, s.bs, seq, g, with_bias,
                      gat_name(op.options(), d) + (with_bias ? " bias" : " no bias") + " call " +
                          std::to_string(call));
    ++call;
    if (any_rank(HasFailure())) return;  // uniform
  }
}

TEST_P(UlyssesShapes, A2aTransposeGemmMatchesAlltoallThenGemm) {
  const Case c = GetParam();
  const Shape& s = c.shape;
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t seq = s.seq_w * W;
  A2aTransposeGemm op(ctx, atg_options(c.in, c.out, s.bs, seq, s.heads_w * W, s.head_dim, s.n));
  int call = 0;
  for (bool with_bias : {true, false})
    for (bool with_a2a : {true, false}) {
      const Dims d = dims_of(op.options(), s.bs, seq);
      AtgData g = atg_data(op.options(), d, call);
      check_atg_forward(op, s.bs, seq, g, with_bias, with_a2a,
                        atg_name(op.options(), d) + (with_bias ? " bias" : " no bias") +
                            (with_a2a ? " a2a_output" : "") + " call " + std::to_string(call));
      ++call;
      if (any_rank(HasFailure())) return;  // uniform
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, UlyssesShapes, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return case_name(i.param);
                         });

// ---- 2. shapes below the create-time maxima; bs == 0 ----------------------------------------

class UlyssesMaxima : public MpiTest,
                      public ::testing::WithParamInterface<std::pair<DType, DType>> {};

// One op per kind, created with max_bs = 3, max_seq = 6·W; forwards with smaller (and equal)
// bs and seq in turn, bs == 0 among them. A layout computed from the maxima instead of the call's
// bs and seq shows up as misplaced elements.
TEST_P(UlyssesMaxima, ShapesBelowTheMaxima) {
  const auto [in, out] = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t max_bs = 3, max_seq = 6 * W;
  GemmA2aTranspose gat(ctx, gat_options(in, out, max_bs, max_seq, 7, 2 * W, 3));
  A2aTransposeGemm atg(ctx, atg_options(in, out, max_bs, max_seq, 2 * W, 3, 5));
  const std::pair<int64_t, int64_t> calls[] = {{1, W},     {2, 3 * W}, {3, 6 * W}, {0, 2 * W},
                                               {3, 5 * W}, {1, 6 * W}, {2, 2 * W}, {3, W}};
  int call = 0;
  for (auto [bs, seq] : calls) {
    const std::string at =
        " (max_bs=3, max_seq=" + std::to_string(max_seq) + ") call " + std::to_string(call);
    {
      const Dims d = dims_of(gat.options(), bs, seq);
      GatData g = gat_data(gat.options(), d, call);
      check_gat_forward(gat, bs, seq, g, call % 2 == 0, gat_name(gat.options(), d) + at);
    }
    {
      const Dims d = dims_of(atg.options(), bs, seq);
      AtgData g = atg_data(atg.options(), d, call);
      check_atg_forward(atg, bs, seq, g, call % 2 == 1, call % 3 != 2,
                        atg_name(atg.options(), d) + at);
    }
    ++call;
    if (any_rank(HasFailure())) return;  // uniform
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, UlyssesMaxima, ::testing::ValuesIn(kPairs),
                         [](const ::testing::TestParamInfo<std::pair<DType, DType>>& i) {
                           return std::string(dtype_name(i.param.first)) + "_" +
                                  dtype_name(i.param.second);
                         });

class UlyssesNoop : public MpiTest {};

// bs == 0 writes nothing, with real buffers or with null pointers, and the op works afterwards.
TEST_F(UlyssesNoop, BsZeroIsANoOp) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  GemmA2aTranspose gat(ctx, gat_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, 8, W, 4));
  A2aTransposeGemm atg(ctx, atg_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, W, 4, 6));
  for (int64_t seq : {int64_t{W}, int64_t{4 * W}}) {
    const std::string tag = "bs=0 seq=" + std::to_string(seq);
    {
      const Dims d = dims_of(gat.options(), 0, seq);
      GatData g = gat_data(gat.options(), d, 1);
      check_gat_forward(gat, 0, seq, g, true, std::string(kGat) + " " + tag);
      try {
        gat.forward(nullptr, 0, seq, nullptr, nullptr, nullptr);
      } catch (const std::exception& e) {
        ADD_FAILURE() << kGat << " " << tag << " null pointers: rank " << r
                      << ": threw: " << e.what();
      }
    }
    {
      const Dims d = dims_of(atg.options(), 0, seq);
      AtgData g = atg_data(atg.options(), d, 1);
      check_atg_forward(atg, 0, seq, g, true, true, std::string(kAtg) + " " + tag);
      try {
        atg.forward(nullptr, 0, seq, nullptr, nullptr, nullptr, nullptr);
      } catch (const std::exception& e) {
        ADD_FAILURE() << kAtg << " " << tag << " null pointers: rank " << r
                      << ": threw: " << e.what();
      }
    }
  }
  if (any_rank(HasFailure())) return;
  // Still usable.
  const Dims dg = dims_of(gat.options(), 2, 4 * W);
  check_gat_forward(gat, 2, 4 * W, gat_data(gat.options(), dg, 2), true,
                    gat_name(gat.options(), dg) + " after bs=0");
  const Dims da = dims_of(atg.options(), 2, 4 * W);
  check_atg_forward(atg, 2, 4 * W, atg_data(atg.options(), da, 2), true, true,
                    atg_name(atg.options(), da) + " after bs=0");
}

// ---- 3. many consecutive calls --------------------------------------------------------------

class UlyssesCalls : public MpiTest {};

const std::pair<int64_t, int64_t> kCycle[] = {{2, 4}, {1, 1}, {0, 2}, {2, 3}, {1, 4}, {2, 2}};

// 200 forwards on one op reusing the same buffers with new contents every call: input, weight
// and bias all change, bs and seq change (including bs == 0), bias comes and goes.
TEST_F(UlyssesCalls, GemmA2aTransposeTwoHundredCalls) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const GemmA2aTransposeOptions o =
      gat_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, 8, 2 * W, 4);
  GemmA2aTranspose op(ctx, o);
  const Dims max_d = dims_of(o, o.max_bs, o.max_seq);
  GatData g{Bytes(sz(o.max_bs * max_d.seq_w() * o.hidden) * 4),
            Bytes(sz(max_d.width() * o.hidden) * 4), Bytes(sz(max_d.width()) * 4)};
  Bytes out = poisoned_output(o.output_dtype, gat_out_count(max_d));
  for (int call = 0; call < 200; ++call) {
    const int64_t bs = kCycle[call % 6].first, seq = kCycle[call % 6].second * W;
    const bool with_bias = call % 3 != 1;
    const Dims d = dims_of(o, bs, seq);
    refill(g.input, o.input_dtype, sz(bs * d.seq_w() * o.hidden), seed_of(r, call, 11));
    refill(g.weight, o.input_dtype, sz(d.width() * o.hidden), seed_of(r, call, 12));
    refill(g.bias, o.output_dtype, sz(d.width()), seed_of(r, call, 13));
    std::fill(out.begin(), out.end(), kPoison);
    const std::string what = gat_name(o, d) + " call " + std::to_string(call);
    Reference ref = gat_reference(o, d, g.input, g.weight, with_bias ? &g.bias : nullptr);
    try {
      op.forward(g.input.data(), bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
                 out.data());
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": rank " << r << ": forward threw: " << e.what();
    }
    if (!HasFailure()) {
      const std::size_t count = gat_out_count(d);
      expect_close_at(ref, out, o.output_dtype, count, what, gat_where(d));
      expect_untouched(out, count * 4, what);
    }
    if (any_rank(HasFailure())) break;
  }
}

TEST_F(UlyssesCalls, A2aTransposeGemmTwoHundredCalls) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const A2aTransposeGemmOptions o =
      atg_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, 2 * W, 4, 6);
  A2aTransposeGemm op(ctx, o);
  const Dims max_d = dims_of(o, o.max_bs, o.max_seq);
  AtgData g{Bytes(sz(o.max_bs * max_d.heads_w() * o.max_seq * o.head_dim) * 4),
            Bytes(sz(o.n * max_d.width()) * 4), Bytes(sz(o.n) * 4)};
  const std::size_t max_rows = sz(o.max_bs * max_d.seq_w());
  Bytes out = poisoned_output(o.output_dtype, max_rows * sz(o.n));
  Bytes a2a(max_rows * sz(max_d.width()) * 4, kA2aPoison);
  for (int call = 0; call < 200; ++call) {
    const int64_t bs = kCycle[call % 6].first, seq = kCycle[call % 6].second * W;
    const bool with_bias = call % 3 != 1, with_a2a = call % 2 == 0;
    const Dims d = dims_of(o, bs, seq);
    const std::size_t rows = sz(bs * d.seq_w());
    refill(g.input, o.input_dtype, sz(bs * d.heads_w() * seq * o.head_dim), seed_of(r, call, 21));
    refill(g.weight, o.input_dtype, sz(o.n * d.width()), seed_of(r, call, 22));
    refill(g.bias, o.output_dtype, sz(o.n), seed_of(r, call, 23));
    std::fill(out.begin(), out.end(), kPoison);
    std::fill(a2a.begin(), a2a.end(), kA2aPoison);
    const std::string what =
        atg_name(o, d) + (with_a2a ? " a2a_output" : "") + " call " + std::to_string(call);
    Bytes a2a_ref = atg_a2a_reference(o.input_dtype, d, g.input);
    try {
      op.forward(g.input.data(), bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
                 out.data(), with_a2a ? a2a.data() : nullptr);
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": rank " << r << ": forward threw: " << e.what();
    }
    if (!HasFailure()) {
      Reference ref = gemm_reference(o.input_dtype, o.output_dtype, sz(rows), o.n, d.width(),
                                     a2a_ref, g.weight, with_bias ? &g.bias : nullptr);
      expect_close_at(ref, out, o.output_dtype, rows * sz(o.n), what, atg_where(d, o.n));
      expect_untouched(out, rows * sz(o.n) * 4, what);
      const std::size_t a2a_bytes = with_a2a ? rows * sz(d.width()) * 4 : 0;
      if (with_a2a) {
        Bytes got(a2a.begin(), a2a.begin() + static_cast<std::ptrdiff_t>(a2a_bytes));
        expect_same_a2a(a2a_ref, got, o.input_dtype, d, what);
      }
      for (std::size_t i = a2a_bytes; i < a2a.size(); ++i)
        if (a2a[i] != kA2aPoison) {
          ADD_FAILURE() << what << ": rank " << r << ": a2a_output written at byte " << i;
          break;
        }
    }
    if (any_rank(HasFailure())) break;
  }
}

// ---- 4. benchmark paths: gemm-only and comm-only --------------------------------------------

class UlyssesPaths : public MpiTest,
                     public ::testing::WithParamInterface<std::pair<DType, DType>> {};

// forward_gemm_only then forward_comm_only gives forward's output, bit for bit (same GEMM blocks,
// same transpose), twice with different data; a normal forward afterwards is still correct.
TEST_P(UlyssesPaths, GemmA2aTransposeGemmOnlyThenCommOnly) {
  const auto [in, out] = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t bs = 3, seq = 5 * W;
  GemmA2aTranspose op(ctx, gat_options(in, out, bs, seq, 7, 3 * W, 3));
  const Dims d = dims_of(op.options(), bs, seq);
  const std::size_t count = gat_out_count(d), esz = dtype_size(out);
  const std::string tag = gat_name(op.options(), d);
  int call = 40;
  for (int rep = 0; rep < 2; ++rep) {
    const bool with_bias = rep == 0;
    GatData g = gat_data(op.options(), d, call++);
    Bytes fused;
    if (!check_gat_forward(op, bs, seq, g, with_bias, tag + " forward rep " + std::to_string(rep),
                           &fused))
      fused.clear();
    try {
      op.forward_gemm_only(g.input.data(), bs, seq, g.weight.data(),
                           with_bias ? g.bias.data() : nullptr);
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": forward_gemm_only threw: " << e.what();
    }
    MPI_Barrier(MPI_COMM_WORLD);  // gemm-only is local
    Bytes split = poisoned_output(out, count);
    try {
      op.forward_comm_only(bs, seq, split.data());
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": forward_comm_only threw: " << e.what();
    }
    expect_untouched(split, count * esz, tag + " comm-only");
    if (!fused.empty())
      expect_same_bits(fused, split, out, d.head_dim,
                       tag + " gemm-only + comm-only vs forward rep " + std::to_string(rep),
                       "row (b·nheads/W + h)·seq + t");
    MPI_Barrier(MPI_COMM_WORLD);
    if (any_rank(HasFailure())) return;  // uniform
  }
  check_gat_forward(op, bs, seq, gat_data(op.options(), d, call++), true,
                    tag + " forward after the benchmark paths");
}

// forward_comm_only fills a2a_output exactly as forward does; forward_gemm_only over it gives
// forward's output bit for bit. Then once more with a2a_output null; a normal forward after.
TEST_P(UlyssesPaths, A2aTransposeGemmCommOnlyThenGemmOnly) {
  const auto [in, out] = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t bs = 3, seq = 5 * W;
  A2aTransposeGemm op(ctx, atg_options(in, out, bs, seq, 3 * W, 3, 5));
  const A2aTransposeGemmOptions& o = op.options();
  const Dims d = dims_of(o, bs, seq);
  const std::size_t rows = sz(bs * d.seq_w()), count = rows * sz(o.n);
  const std::size_t a2a_bytes = rows * sz(d.width()) * dtype_size(in);
  const std::string tag = atg_name(o, d);
  int call = 60;
  for (int rep = 0; rep < 2; ++rep) {
    const bool with_bias = rep == 0, comm_a2a = rep == 0;
    AtgData g = atg_data(o, d, call++);
    Bytes fused, fused_a2a;
    if (!check_atg_forward(op, bs, seq, g, with_bias, true,
                           tag + " forward rep " + std::to_string(rep), &fused, &fused_a2a)) {
      fused.clear();
      fused_a2a.clear();
    }
    Bytes a2a(a2a_bytes + kGuardElems * dtype_size(in), kA2aPoison);
    try {
      op.forward_comm_only(g.input.data(), bs, seq, comm_a2a ? a2a.data() : nullptr);
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": forward_comm_only threw: " << e.what();
    }
    if (comm_a2a && !fused_a2a.empty())
      expect_same_a2a(fused_a2a, a2a, in, d, tag + " comm-only a2a_output vs forward's");
    for (std::size_t i = comm_a2a ? a2a_bytes : 0; i < a2a.size(); ++i)
      if (a2a[i] != kA2aPoison) {
        ADD_FAILURE() << tag << ": rank " << r << ": comm-only wrote a2a_output at byte " << i;
        break;
      }
    Bytes split = poisoned_output(out, count);
    try {
      op.forward_gemm_only(bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
                           split.data());
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": forward_gemm_only threw: " << e.what();
    }
    expect_untouched(split, count * dtype_size(out), tag + " gemm-only");
    if (!fused.empty())
      expect_same_bits(fused, split, out, o.n,
                       tag + " comm-only + gemm-only vs forward rep " + std::to_string(rep),
                       "row b·seq/W + t");
    MPI_Barrier(MPI_COMM_WORLD);         // gemm-only is local
    if (any_rank(HasFailure())) return;  // uniform
  }
  check_atg_forward(op, bs, seq, atg_data(o, d, call++), true, true,
                    tag + " forward after the benchmark paths");
}

class UlyssesPathsOrder : public MpiTest {};

// forward_gemm_only is local and may be called as soon as forward returned on this rank, with
// other data: it must not disturb peers that are still transposing this rank's blocks of that
// forward in. Then comm-only transposes the gemm-only blocks. 50 rounds, no barrier between
// forward and gemm-only.
TEST_F(UlyssesPathsOrder, GemmA2aTransposeGemmOnlyRightAfterForward) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t bs = 3, seq = 5 * W;
  GemmA2aTranspose op(ctx, gat_options(DType::kFloat32, DType::kFloat32, bs, seq, 7, 3 * W, 3));
  const GemmA2aTransposeOptions& o = op.options();
  const Dims d = dims_of(o, bs, seq);
  const std::size_t count = gat_out_count(d);
  for (int round = 0; round < 50; ++round) {
    const std::string tag = gat_name(o, d) + " round " + std::to_string(round);
    GatData a = gat_data(o, d, 1000 + 2 * round), b = gat_data(o, d, 1001 + 2 * round);
    Reference ref_a = gat_reference(o, d, a.input, a.weight, &a.bias);
    Reference ref_b = gat_reference(o, d, b.input, b.weight, &b.bias);
    Bytes out_a = poisoned_output(o.output_dtype, count), out_b = out_a;
    try {
      op.forward(a.input.data(), bs, seq, a.weight.data(), a.bias.data(), out_a.data());
      op.forward_gemm_only(b.input.data(), bs, seq, b.weight.data(), b.bias.data());
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": threw: " << e.what();
    }
    MPI_Barrier(MPI_COMM_WORLD);  // gemm-only is local
    try {
      op.forward_comm_only(bs, seq, out_b.data());
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": forward_comm_only threw: " << e.what();
    }
    expect_close_at(ref_a, out_a, o.output_dtype, count, tag + " forward (data A)", gat_where(d));
    expect_close_at(ref_b, out_b, o.output_dtype, count, tag + " gemm-only (data B) + comm-only",
                    gat_where(d));
    if (any_rank(HasFailure())) return;  // uniform
  }
}

// forward_gemm_only waits until host peers released this rank's segment after the last call
// that moved data: a no-op forward (bs == 0) or a forward rejected with kInvalidArgument in
// between releases nothing, and gemm-only must not wait for it (it used to time out on every
// rank of a host with more than one rank). Each round: forward (data A), the in-between call,
// gemm-only (data B), comm-only, which must transpose B's blocks. A short timeout makes a
// regression fail in seconds.
TEST_F(UlyssesPathsOrder, GemmA2aTransposeGemmOnlyAfterNoOpOrRejectedCall) {
  Context ctx(MPI_COMM_WORLD, test_options(5.0));
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t bs = 2, seq = 3 * W;
  GemmA2aTranspose op(ctx, gat_options(DType::kFloat32, DType::kFloat32, bs, seq, 7, 2 * W, 3));
  const GemmA2aTransposeOptions& o = op.options();
  const Dims d = dims_of(o, bs, seq);
  const std::size_t count = gat_out_count(d);
  struct Between {
    const char* name;
    bool rejected;  // kInvalidArgument expected on every rank
    std::function<void(const GatData&, void*)> call;
  };
  std::vector<Between> betweens = {
      {"bs=0 no-op", false,
       [&](const GatData& g, void* out) {
         op.forward(g.input.data(), 0, seq, g.weight.data(), g.bias.data(), out);
       }},
      {"bs=0 no-op with null pointers", false,
       [&](const GatData&, void*) { op.forward(nullptr, 0, seq, nullptr, nullptr, nullptr); }},
      {"bs > max_bs everywhere (rejected)", true,
       [&](const GatData& g, void* out) {
         op.forward(g.input.data(), bs + 1, seq, g.weight.data(), g.bias.data(), out);
       }},
  };
  if (W > 1) {
    betweens.push_back(
        {"seq % W != 0 everywhere (rejected)", true, [&](const GatData& g, void* out) {
           op.forward(g.input.data(), 1, W + 1, g.weight.data(), g.bias.data(), out);
         }});
    betweens.push_back(
        {"seq differs on the last rank (rejected)", true, [&](const GatData& g, void* out) {
           op.forward(g.input.data(), 1, r == W - 1 ? 2 * W : W, g.weight.data(), g.bias.data(),
                      out);
         }});
  }
  int call = 1200;
  for (const Between& between : betweens) {
    const std::string tag = gat_name(o, d) + " after " + between.name;
    GatData a = gat_data(o, d, call++), b = gat_data(o, d, call++);
    // Room for the largest shape any in-between call names (bs + 1, seq).
    GatData scratch = gat_data(o, dims_of(o, bs + 1, seq), call++);
    Bytes scratch_out = poisoned_output(o.output_dtype, gat_out_count(dims_of(o, bs + 1, seq)));
    Reference ref_b = gat_reference(o, d, b.input, b.weight, &b.bias);
    check_gat_forward(op, bs, seq, a, true, tag + " forward (data A)");
    if (between.rejected) {
      expect_error([&] { between.call(scratch, scratch_out.data()); }, Errc::kInvalidArgument,
                   {kGat}, tag);
    } else {
      try {
        between.call(scratch, scratch_out.data());
      } catch (const std::exception& e) {
        ADD_FAILURE() << tag << ": rank " << r << ": threw: " << e.what();
      }
    }
    expect_untouched(scratch_out, 0, tag + " (in-between call)");
    try {
      op.forward_gemm_only(b.input.data(), bs, seq, b.weight.data(), b.bias.data());
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": forward_gemm_only threw: " << e.what();
    }
    MPI_Barrier(MPI_COMM_WORLD);  // gemm-only is local
    Bytes split = poisoned_output(o.output_dtype, count);
    try {
      op.forward_comm_only(bs, seq, split.data());
    } catch (const std::exception& e) {
      ADD_FAILURE() << tag << ": rank " << r << ": forward_comm_only threw: " << e.what();
    }
    expect_untouched(split, count * dtype_size(o.output_dtype), tag + " comm-only");
    expect_close_at(ref_b, split, o.output_dtype, count, tag + " gemm-only (data B) + comm-only",
                    gat_where(d));
    if (any_rank(HasFailure())) return;  // uniform
  }
  check_gat_forward(op, bs, seq, gat_data(o, d, call), true,
                    gat_name(o, d) + " forward after the in-between calls");
}

INSTANTIATE_TEST_SUITE_P(Pairs, UlyssesPaths, ::testing::ValuesIn(kPairs),
                         [](const ::testing::TestParamInfo<std::pair<DType, DType>>& i) {
                           return std::string(dtype_name(i.param.first)) + "_" +
                                  dtype_name(i.param.second);
                         });

// ---- 5. a Ulysses attention block with identity attention ----------------------------------

class UlyssesRoundTrip : public MpiTest,
                         public ::testing::WithParamInterface<std::pair<DType, DType>> {};

// x_r [bs, seq/W, hidden] → GemmA2aTranspose (QKV-like projection) → heads-sharded
// [bs, nheads/W, seq, head_dim] → (identity attention) → A2aTransposeGemm with an identity
// weight: the two transposes cancel, so a2a_output_r = y_r = x_r · weight_rᵀ + bias_r, and the
// output equals a2a_output exactly (x · I adds only exact zeros).
TEST_P(UlyssesRoundTrip, TransposesCancel) {
  const auto [in, mid] = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t bs = 2, seq = 8 * W, nheads = 2 * W, head_dim = 4, hidden = 16;
  const int64_t N = nheads * head_dim;
  GemmA2aTranspose gat(ctx, gat_options(in, mid, bs, seq, hidden, nheads, head_dim));
  // The heads come back in GemmA2aTranspose's output dtype; bf16 stays bf16, f32 stays f32.
  A2aTransposeGemm atg(ctx, atg_options(mid, mid, bs, seq, nheads, head_dim, N));
  const Dims d = dims_of(gat.options(), bs, seq);
  const std::string tag = std::string("round trip ") + dtype_name(in) + "->" + dtype_name(mid) +
                          " " + dims_name(d) + " hidden=" + std::to_string(hidden);
  GatData g = gat_data(gat.options(), d, 80);
  Bytes heads;
  if (!check_gat_forward(gat, bs, seq, g, true, tag + " first op", &heads)) heads.clear();
  if (any_rank(heads.empty())) return;

  // y_r, this rank's own projection, is what must come back.
  Reference y = gemm_reference(in, mid, bs * d.seq_w(), N, hidden, g.input, g.weight, &g.bias);
  // The identity [N, N] in the dtype of the heads.
  const std::size_t esz = dtype_size(mid);
  Bytes one(esz);
  if (mid == DType::kFloat32) {
    const float v = 1.0f;
    std::memcpy(one.data(), &v, 4);
  } else if (mid == DType::kFloat64) {
    const double v = 1.0;
    std::memcpy(one.data(), &v, 8);
  } else {
    const uint16_t v = float_to_bf16(1.0f);
    std::memcpy(one.data(), &v, 2);
  }
  Bytes eye(sz(N * N) * esz, 0);
  for (int64_t j = 0; j < N; ++j) std::memcpy(eye.data() + sz(j * N + j) * esz, one.data(), esz);
  AtgData a{heads, eye, Bytes(sz(N) * esz, 0)};
  Bytes out, a2a;
  if (!check_atg_forward(atg, bs, seq, a, false, true, tag + " second op", &out, &a2a)) return;
  const std::size_t count = sz(bs * d.seq_w() * N);
  expect_close_at(y, a2a, mid, count, tag + ": a2a_output vs y_r", atg_where(d, N));
  int64_t differ = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (load(out.data(), mid, i) != load(a2a.data(), mid, i)) {
      if (differ++ < 4)
        ADD_FAILURE() << tag << ": rank " << r << " " << atg_where(d, N)(i) << ": output "
                      << load(out.data(), mid, i) << " != a2a_output " << load(a2a.data(), mid, i)
                      << " with an identity weight";
    }
}

INSTANTIATE_TEST_SUITE_P(Pairs, UlyssesRoundTrip, ::testing::ValuesIn(kPairs),
                         [](const ::testing::TestParamInfo<std::pair<DType, DType>>& i) {
                           return std::string(dtype_name(i.param.first)) + "_" +
                                  dtype_name(i.param.second);
                         });

// ---- 6. bad inputs ----------------------------------------------------------------------------

class UlyssesBadInput : public MpiTest {};

TEST_F(UlyssesBadInput, GemmA2aTransposeForwardErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t max_bs = 2, max_seq = 4 * W;
  GemmA2aTranspose op(ctx,
                      gat_options(DType::kFloat32, DType::kFloat32, max_bs, max_seq, 8, 2 * W, 4));
  // Room for the largest shape tried (bs 3, seq 5·W) so that no call can overrun.
  const Dims big = dims_of(op.options(), 3, 5 * W);
  GatData g = gat_data(op.options(), big, 0);
  Bytes outb = poisoned_output(DType::kFloat32, gat_out_count(big));
  const void* in = g.input.data();
  const void* w = g.weight.data();
  const void* b = g.bias.data();
  void* o = outb.data();
  const auto expect_invalid = [&](const std::function<void()>& fn, std::vector<std::string> needles,
                                  const std::string& what) {
    needles.insert(needles.begin(), kGat);
    expect_error(fn, Errc::kInvalidArgument, needles, std::string(kGat) + " " + what);
  };
  if (W > 1) {
    expect_invalid([&] { op.forward(in, 1, W + 1, w, b, o); }, {"seq"}, "seq % W != 0");
    expect_invalid([&] { op.forward(in, 1, r == W - 1 ? 2 * W : W, w, b, o); }, {"seq"},
                   "ranks pass different seq");
    expect_invalid([&] { op.forward(in, r == 0 ? 2 : 1, W, w, b, o); }, {"bs"},
                   "ranks pass different bs");
  }
  expect_invalid([&] { op.forward(in, 1, max_seq + W, w, b, o); }, {"seq"}, "seq > max_seq");
  expect_invalid([&] { op.forward(in, max_bs + 1, W, w, b, o); }, {"bs"}, "bs > max_bs");
  expect_invalid([&] { op.forward(in, -1, W, w, b, o); }, {"bs"}, "bs < 0");
  expect_invalid([&] { op.forward(in, 1, W, r == 0 ? nullptr : w, b, o); }, {"weight"},
                 "NULL weight on rank 0");
  expect_invalid([&] { op.forward(in, 1, W, nullptr, b, o); }, {"weight"},
                 "NULL weight everywhere");
  expect_invalid([&] { op.forward(r == W - 1 ? nullptr : in, 1, W, w, b, o); }, {"input"},
                 "NULL input on the last rank");
  expect_invalid([&] { op.forward(in, 1, W, w, b, r == 0 ? nullptr : o); }, {"output"},
                 "NULL output on rank 0");
  // comm-only is collective too.
  expect_invalid([&] { op.forward_comm_only(1, max_seq + W, o); }, {"seq"},
                 "comm-only seq > max_seq");
  // gemm-only is local: an error on every rank when every rank passes the bad value.
  expect_invalid([&] { op.forward_gemm_only(in, max_bs + 1, W, w, b); }, {"bs"},
                 "gemm-only bs > max_bs");
  MPI_Barrier(MPI_COMM_WORLD);
  // Still usable after all of that, twice.
  for (int call = 1; call <= 2; ++call) {
    const Dims d = dims_of(op.options(), max_bs, max_seq);
    check_gat_forward(op, max_bs, max_seq, gat_data(op.options(), d, call), call == 1,
                      gat_name(op.options(), d) + " good forward after errors");
  }
}

TEST_F(UlyssesBadInput, A2aTransposeGemmForwardErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t max_bs = 2, max_seq = 4 * W;
  A2aTransposeGemm op(ctx,
                      atg_options(DType::kFloat32, DType::kFloat32, max_bs, max_seq, 2 * W, 4, 6));
  const Dims big = dims_of(op.options(), 3, 5 * W);
  AtgData g = atg_data(op.options(), big, 0);
  const std::size_t rows = sz(3 * big.seq_w());
  Bytes outb = poisoned_output(DType::kFloat32, rows * 6);
  Bytes a2a(rows * sz(big.width()) * 4, kA2aPoison);
  const void* in = g.input.data();
  const void* w = g.weight.data();
  const void* b = g.bias.data();
  void* o = outb.data();
  void* a = a2a.data();
  const auto expect_invalid = [&](const std::function<void()>& fn, std::vector<std::string> needles,
                                  const std::string& what) {
    needles.insert(needles.begin(), kAtg);
    expect_error(fn, Errc::kInvalidArgument, needles, std::string(kAtg) + " " + what);
  };
  if (W > 1) {
    expect_invalid([&] { op.forward(in, 1, W + 1, w, b, o, a); }, {"seq"}, "seq % W != 0");
    expect_invalid([&] { op.forward(in, 1, r == W - 1 ? 2 * W : W, w, b, o, a); }, {"seq"},
                   "ranks pass different seq");
    expect_invalid([&] { op.forward(in, r == 0 ? 2 : 1, W, w, b, o, a); }, {"bs"},
                   "ranks pass different bs");
  }
  expect_invalid([&] { op.forward(in, 1, max_seq + W, w, b, o, a); }, {"seq"}, "seq > max_seq");
  expect_invalid([&] { op.forward(in, max_bs + 1, W, w, b, o, a); }, {"bs"}, "bs > max_bs");
  expect_invalid([&] { op.forward(in, -1, W, w, b, o, a); }, {"bs"}, "bs < 0");
  expect_invalid([&] { op.forward(in, 1, W, r == 0 ? nullptr : w, b, o, a); }, {"weight"},
                 "NULL weight on rank 0");
  expect_invalid([&] { op.forward(in, 1, W, nullptr, b, o); }, {"weight"},
                 "NULL weight everywhere");
  expect_invalid([&] { op.forward(r == W - 1 ? nullptr : in, 1, W, w, b, o, a); }, {"input"},
                 "NULL input on the last rank");
  expect_invalid([&] { op.forward(in, 1, W, w, b, r == 0 ? nullptr : o, a); }, {"output"},
                 "NULL output on rank 0");
  expect_invalid([&] { op.forward_comm_only(in, 1, max_seq + W, a); }, {"seq"},
                 "comm-only seq > max_seq");
  expect_invalid([&] { op.forward_gemm_only(max_bs + 1, W, w, b, o); }, {"bs"},
                 "gemm-only bs > max_bs");
  MPI_Barrier(MPI_COMM_WORLD);
  for (int call = 1; call <= 2; ++call) {
    const Dims d = dims_of(op.options(), max_bs, max_seq);
    check_atg_forward(op, max_bs, max_seq, atg_data(op.options(), d, call), call == 1, true,
                      atg_name(op.options(), d) + " good forward after errors");
  }
}

TEST_F(UlyssesBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const GemmA2aTransposeOptions gat_good =
      gat_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, 8, 2 * W, 4);
  const A2aTransposeGemmOptions atg_good =
      atg_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, 2 * W, 4, 6);
  const auto gat_invalid = [&](const GemmA2aTransposeOptions& o, std::vector<std::string> needles,
                               const std::string& what) {
    needles.insert(needles.begin(), kGat);
    expect_error([&] { GemmA2aTranspose op(ctx, o); }, Errc::kInvalidArgument, needles,
                 std::string(kGat) + " create: " + what);
  };
  const auto atg_invalid = [&](const A2aTransposeGemmOptions& o, std::vector<std::string> needles,
                               const std::string& what) {
    needles.insert(needles.begin(), kAtg);
    expect_error([&] { A2aTransposeGemm op(ctx, o); }, Errc::kInvalidArgument, needles,
                 std::string(kAtg) + " create: " + what);
  };
  if (W > 1) {
    GemmA2aTransposeOptions g = gat_good;
    g.nheads = W + 1;
    gat_invalid(g, {"nheads"}, "nheads % W != 0");
    A2aTransposeGemmOptions a = atg_good;
    a.nheads = W + 1;
    atg_invalid(a, {"nheads"}, "nheads % W != 0");
    // Options that differ between ranks.
    g = gat_good;
    if (r == W - 1) g.hidden = 9;
    gat_invalid(g, {"hidden"}, "hidden differs on the last rank");
    g = gat_good;
    if (r == 0) g.nheads = 4 * W;
    gat_invalid(g, {"nheads"}, "nheads differs on rank 0");
    a = atg_good;
    if (r == W - 1) a.n = 7;
    atg_invalid(a, {}, "n differs on the last rank");
    a = atg_good;
    if (r == 0) a.head_dim = 5;
    atg_invalid(a, {"head_dim"}, "head_dim differs on rank 0");
  }
  {
    GemmA2aTransposeOptions g = gat_good;
    g.head_dim = 0;
    gat_invalid(g, {"head_dim"}, "head_dim = 0");
    g = gat_good;
    g.hidden = 0;
    gat_invalid(g, {}, "hidden = 0");
    A2aTransposeGemmOptions a = atg_good;
    a.head_dim = 0;
    atg_invalid(a, {"head_dim"}, "head_dim = 0");
    a = atg_good;
    a.n = 0;
    atg_invalid(a, {}, "n = 0");
  }
  const std::pair<DType, DType> bad_pairs[] = {{DType::kBFloat16, DType::kFloat64},
                                               {DType::kFloat32, DType::kBFloat16},
                                               {DType::kFloat64, DType::kFloat32},
                                               {DType::kFloat32, DType::kFloat64}};
  for (auto [in, out] : bad_pairs) {
    const std::string pair = std::string("pair ") + dtype_name(in) + " -> " + dtype_name(out);
    GemmA2aTransposeOptions g = gat_good;
    g.input_dtype = in;
    g.output_dtype = out;
    gat_invalid(g, {}, pair);
    A2aTransposeGemmOptions a = atg_good;
    a.input_dtype = in;
    a.output_dtype = out;
    atg_invalid(a, {}, pair);
  }
  {
    GemmA2aTransposeOptions g = gat_good;
    if (r == 0) g.output_dtype = DType::kBFloat16;  // invalid pair on rank 0 only
    gat_invalid(g, {}, "invalid pair on rank 0 only");
    A2aTransposeGemmOptions a = atg_good;
    if (r == 0) a.output_dtype = DType::kBFloat16;
    atg_invalid(a, {}, "invalid pair on rank 0 only");
  }
  // Good ops on the same context still work.
  if (any_rank(HasFailure())) return;
  GemmA2aTranspose gat(ctx, gat_good);
  A2aTransposeGemm atg(ctx, atg_good);
  const Dims d = dims_of(gat_good, 2, 4 * W);
  check_gat_forward(gat, 2, 4 * W, gat_data(gat_good, d, 3), true,
                    gat_name(gat_good, d) + " good op after create errors");
  check_atg_forward(atg, 2, 4 * W, atg_data(atg_good, d, 3), true, true,
                    atg_name(atg_good, d) + " good op after create errors");
}

// ---- 7. no shared-memory segment outlives its op ---------------------------------------------

class UlyssesShm : public MpiTest {};

TEST_F(UlyssesShm, NoSegmentsLeftAfterDestroy) {
  const int r = world_rank();
  {
    Context ctx(MPI_COMM_WORLD, test_options());
    const int W = ctx.world_size();
    MPI_Barrier(MPI_COMM_WORLD);
    const std::vector<std::string> before = fluxcpp_shm_entries(/*own_only=*/true);
    {
      GemmA2aTranspose gat(ctx,
                           gat_options(DType::kBFloat16, DType::kBFloat16, 2, 4 * W, 8, 2 * W, 4));
      A2aTransposeGemm atg(ctx,
                           atg_options(DType::kBFloat16, DType::kFloat32, 2, 4 * W, 2 * W, 4, 6));
      const Dims d = dims_of(gat.options(), 2, 4 * W);
      check_gat_forward(gat, 2, 4 * W, gat_data(gat.options(), d, 5), true,
                        gat_name(gat.options(), d));
      check_atg_forward(atg, 2, 4 * W, atg_data(atg.options(), d, 5), true, true,
                        atg_name(atg.options(), d));
      // A failed forward must not leak either.
      expect_error([&] { gat.forward(nullptr, 1, W, nullptr, nullptr, nullptr); },
                   Errc::kInvalidArgument, {kGat}, "null pointers");
      MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<std::string> after = fluxcpp_shm_entries(/*own_only=*/true);
    for (const std::string& s : after)
      if (std::find(before.begin(), before.end(), s) == before.end())
        ADD_FAILURE() << "rank " << r << ": /dev/shm/" << s
                      << " outlived the ops (context still open)";
    ctx.close();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (const std::string& s : fluxcpp_shm_entries(/*own_only=*/true))
    ADD_FAILURE() << "rank " << r << ": /dev/shm/" << s << " left after destroy";
}

}  // namespace
}  // namespace fluxcpp::test
