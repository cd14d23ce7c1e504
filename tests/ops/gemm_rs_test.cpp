// GemmRs (GEMM fused with a deterministic reduce-scatter, row-parallel linear) against the
// unfused reference computed here: every rank forms its full partial input_s · weight_sᵀ in
// double (cblas, one BLAS thread), the row blocks are exchanged with MPI_Alltoall and summed, and
// the bias is added once. Where the bias enters the fixed-order sum is not assumed: results must
// lie within a tolerance of the reference, and be bitwise identical across repeated calls, fresh
// ops, contexts with other thread counts, and the gemm-only + comm-only benchmark paths.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// ---- the unfused reference -----------------------------------------------------------------

// describe() plus the world size: the reduction runs over k * W.
std::string describe_w(const Problem& p) {
  return describe(p) + " W=" + std::to_string(world_size());
}

GemmRsOptions options_for(const Problem& p, int64_t max_m) {
  return gemm_op_options<GemmRsOptions>(p, max_m);
}

// This rank's rows [r*rows, (r+1)*rows) of Σ_s input_s · op(weight_s) (+ bias once). Every rank
// forms its full partial [m, n] and |input_s| · |op(weight_s)| in double, MPI_Alltoall hands
// block r to rank r, and the W blocks are summed. Collective (every rank, same rows).
//
// Tolerance of element (i, j): gemm_tolerance with terms k*W and the magnitude
// S = Σ_s Σ_l |a_il||b_jl| + |bias_j|.
Reference rs_reference(const Problem& p, int64_t rows, const Bytes& input, const Bytes& weight,
                       const Bytes* bias) {
  const int W = world_size();
  const int64_t n = p.n, k = p.k, m = rows * W;
  const std::size_t count = static_cast<std::size_t>(rows * n);
  Reference ref{std::vector<double>(count, 0.0), std::vector<double>(count, 0.0)};
  if (m == 0) return ref;  // uniform: every rank has the same m
  std::vector<double> a = widen_f64(input, p.in, static_cast<std::size_t>(m * k));
  std::vector<double> w = widen_f64(weight, p.in, static_cast<std::size_t>(n * k));
  std::vector<double> a_abs(a.size()), w_abs(w.size());
  for (std::size_t i = 0; i < a.size(); ++i) a_abs[i] = std::fabs(a[i]);
  for (std::size_t i = 0; i < w.size(); ++i) w_abs[i] = std::fabs(w[i]);
  const std::size_t mn = static_cast<std::size_t>(m * n);
  std::vector<double> c(mn), c_abs(mn);
  {
    OneBlasThread one;
    const CBLAS_TRANSPOSE tb = p.transpose_weight ? CblasNoTrans : CblasTrans;
    const blasint ldb = static_cast<blasint>(p.transpose_weight ? n : k);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0, a.data(), static_cast<blasint>(k), w.data(), ldb, 0.0,
                c.data(), static_cast<blasint>(n));
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0, a_abs.data(), static_cast<blasint>(k), w_abs.data(),
                ldb, 0.0, c_abs.data(), static_cast<blasint>(n));
  }
  // Send block d: [values of rows d*rows.., |values| of the same rows].
  std::vector<double> send(2 * mn), recv(2 * mn);
  for (int d = 0; d < W; ++d) {
    const std::size_t src = static_cast<std::size_t>(d) * count;
    std::copy(c.begin() + static_cast<std::ptrdiff_t>(src),
              c.begin() + static_cast<std::ptrdiff_t>(src + count),
              send.begin() + static_cast<std::ptrdiff_t>(2 * src));
    std::copy(c_abs.begin() + static_cast<std::ptrdiff_t>(src),
              c_abs.begin() + static_cast<std::ptrdiff_t>(src + count),
              send.begin() + static_cast<std::ptrdiff_t>(2 * src + count));
  }
  MPI_Alltoall(send.data(), static_cast<int>(2 * count), MPI_DOUBLE, recv.data(),
               static_cast<int>(2 * count), MPI_DOUBLE, MPI_COMM_WORLD);
  std::vector<double> mag(count, 0.0);
  for (int s = 0; s < W; ++s) {
    const double* blk = recv.data() + 2 * static_cast<std::size_t>(s) * count;
    for (std::size_t i = 0; i < count; ++i) {
      ref.value[i] += blk[i];
      mag[i] += blk[count + i];
    }
  }
  if (bias != nullptr)
    for (std::size_t i = 0; i < count; ++i) {
      const double b = load(bias->data(), p.out, i % static_cast<std::size_t>(n));
      ref.value[i] += b;
      mag[i] += std::fabs(b);
    }
  for (std::size_t i = 0; i < count; ++i)
    ref.tol[i] = gemm_tolerance(p.in, p.out, k * W, mag[i], ref.value[i]);
  return ref;
}

// ---- checks ----------------------------------------------------------------------------------

// The tensors of one forward on this rank: input [m, k] (own K slice), own weight, and the bias
// (the same on every rank).
struct Data {
  Bytes input, weight, bias;
};

Data make_data(const Problem& p, int64_t m, int call) {
  const int r = world_rank();
  Data d;
  d.input = random_tensor(p.in, static_cast<std::size_t>(m * p.k), seed_of(r, call, 1));
  d.weight = random_tensor(p.in, static_cast<std::size_t>(p.n * p.k), seed_of(r, call, 2));
  d.bias = random_tensor(p.out, static_cast<std::size_t>(p.n), seed_of(0, call, 3));
  return d;
}

const void* ptr_or_null(const Bytes& b) {
  return b.empty() ? nullptr : b.data();
}

// One forward of `op` on `d` (rows per rank `rows`), checked against the reference and for
// writes beyond the block (m == 0 writes nothing). Collective. Returns this rank's output block
// (rows*n elements).
Bytes check_forward(GemmRs& op, const Problem& p, int64_t rows, const Data& d, bool with_bias,
                    const std::string& what) {
  const int64_t m = rows * world_size();
  const std::size_t count = static_cast<std::size_t>(rows * p.n), esz = dtype_size(p.out);
  Reference ref = rs_reference(p, rows, d.input, d.weight, with_bias ? &d.bias : nullptr);
  Bytes out = poisoned_output(p.out, count);
  const bool ok = expect_no_throw(
      [&] {
        op.forward(ptr_or_null(d.input), m, d.weight.data(), with_bias ? d.bias.data() : nullptr,
                   out.data());
      },
      what + " forward");
  if (ok) {
    expect_close(ref, out, p.out, rows, p.n, what, world_rank() * rows);
    expect_untouched(out, count * esz, what);
  }
  out.resize(count * esz);
  return out;
}

// ---- 1. correctness over shapes, dtype pairs, layouts, bias ----------------------------------

class GemmRsTest : public MpiTest, public ::testing::WithParamInterface<GemmShape> {};

// For both weight layouts one op each (the transposed one with max_m above m); two forwards on
// it, with and without bias, fresh data every call.
TEST_P(GemmRsTest, MatchesPartialGemmsThenReduceScatter) {
  const GemmShape s = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  int call = 0;
  for (bool trans : {false, true}) {
    const Problem p{s.in, s.out, s.n, s.k, trans};
    const int64_t max_m = (std::max<int64_t>(s.rows, 1) + (trans ? 2 : 0)) * W;
    GemmRs op(ctx, options_for(p, max_m));
    EXPECT_EQ(op.options().max_m, max_m);
    EXPECT_EQ(op.options().n, s.n);
    EXPECT_EQ(op.options().k, s.k);
    EXPECT_EQ(op.options().transpose_weight, trans);
    for (bool with_bias : {true, false}) {
      const std::string what = describe_w(p) + (with_bias ? " bias" : " no bias") +
                               " m=" + std::to_string(s.rows * W) + " call " + std::to_string(call);
      Data d = make_data(p, s.rows * W, call++);
      check_forward(op, p, s.rows, d, with_bias, what);
    }
    if (any_rank(HasFailure())) return;  // uniform: every rank stops together
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmRsTest, ::testing::ValuesIn(small_shapes(64, 200, 300)),
                         gemm_shape_test_name);

// FLUX's default test shape (M 4096, N 49152, K 12288) divided by 8 and scaled for a CPU: M = 512
// rows in total (rounded down to a multiple of W), n = 768, K = 1536 split over the ranks; bias
// on, one call per case.
struct BigCase {
  DType in, out;
  bool transpose_weight;
};

void PrintTo(const BigCase& c, std::ostream* os) {
  *os << dtype_name(c.in) << "->" << dtype_name(c.out)
      << (c.transpose_weight ? " weight[k,n]" : " weight[n,k]");
}

class GemmRsBig : public MpiTest, public ::testing::WithParamInterface<BigCase> {};

TEST_P(GemmRsBig, FluxDefaultShapeOverEight) {
  const BigCase c = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options(60.0));
  const int W = ctx.world_size();
  const int64_t rows = 512 / W, n = 768, k = 1536 / W;
  const Problem p{c.in, c.out, n, k, c.transpose_weight};
  GemmRs op(ctx, options_for(p, rows * W));
  Data d = make_data(p, rows * W, 0);
  check_forward(op, p, rows, d, true, "big " + describe_w(p) + " m=" + std::to_string(rows * W));
}

INSTANTIATE_TEST_SUITE_P(Flux, GemmRsBig,
                         ::testing::Values(BigCase{DType::kFloat32, DType::kFloat32, false},
                                           BigCase{DType::kBFloat16, DType::kBFloat16, true}),
                         [](const ::testing::TestParamInfo<BigCase>& i) {
                           return std::string(dtype_name(i.param.in)) + "_" +
                                  dtype_name(i.param.out) + (i.param.transpose_weight ? "_wT" : "");
                         });

// ---- 2. many consecutive calls --------------------------------------------------------------

class GemmRsCalls : public MpiTest, public ::testing::WithParamInterface<Problem> {};

}  // namespace

// Outside the unnamed namespace: gtest finds it by argument-dependent lookup, in Problem's own
// namespace.
void PrintTo(const Problem& p, std::ostream* os) {
  *os << describe_w(p);
}

namespace {

// 200 forwards on one op, reusing the same buffers with new contents every call: inputs, weights
// and bias all change, m changes (including 0, sometimes with null pointers), bias comes and
// goes. A stale partial, a cached weight or an early read shows up as a mismatch.
TEST_P(GemmRsCalls, TwoHundredCallsWithChangingDataAndWeights) {
  const Problem p = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t max_rows = 8;
  GemmRs op(ctx, options_for(p, max_rows * W));
  const int64_t rows_cycle[] = {8, 1, 0, 3, 8, 5, 7, 2};
  const std::size_t ein = dtype_size(p.in), eout = dtype_size(p.out);
  Bytes input(static_cast<std::size_t>(max_rows * W * p.k) * ein),
      weight(static_cast<std::size_t>(p.n * p.k) * ein), bias(static_cast<std::size_t>(p.n) * eout);
  Bytes out = poisoned_output(p.out, static_cast<std::size_t>(max_rows * p.n));
  for (int call = 0; call < 200; ++call) {
    const int64_t rows = rows_cycle[call % 8], m = rows * W;
    const bool with_bias = call % 3 != 1;
    refill(input, p.in, static_cast<std::size_t>(m * p.k), seed_of(r, call, 1));
    refill(weight, p.in, static_cast<std::size_t>(p.n * p.k), seed_of(r, call, 2));
    refill(bias, p.out, static_cast<std::size_t>(p.n), seed_of(0, call, 3));
    std::fill(out.begin(), out.end(), kPoison);
    const std::string what =
        describe_w(p) + " call " + std::to_string(call) + " m=" + std::to_string(m);
    Bytes mine(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(m * p.k * ein));
    Reference ref = rs_reference(p, rows, mine, weight, with_bias ? &bias : nullptr);
    const bool nulls = m == 0 && call % 2 == 0;  // m == 0 with null pointers is a no-op too
    const bool ok = expect_no_throw(
        [&] {
          op.forward(nulls ? nullptr : input.data(), m, nulls ? nullptr : weight.data(),
                     with_bias && !nulls ? bias.data() : nullptr, nulls ? nullptr : out.data());
        },
        what + " forward");
    if (ok) {
      expect_close(ref, out, p.out, rows, p.n, what, world_rank() * rows);
      expect_untouched(out, static_cast<std::size_t>(rows * p.n) * eout, what);
    }
    if (any_rank(HasFailure())) break;  // uniform
  }
}

INSTANTIATE_TEST_SUITE_P(Problems, GemmRsCalls,
                         ::testing::Values(Problem{DType::kFloat32, DType::kFloat32, 40, 24, false},
                                           Problem{DType::kBFloat16, DType::kBFloat16, 33, 20,
                                                   true}),
                         [](const ::testing::TestParamInfo<Problem>& i) {
                           return std::string(dtype_name(i.param.in)) + "_" +
                                  dtype_name(i.param.out) + (i.param.transpose_weight ? "_wT" : "");
                         });

// ---- 3. determinism ----------------------------------------------------------------------------

class GemmRsDeterminism : public MpiTest {};

// The same forward gives the same bits: twice on one op, again after a forward with other data,
// on a fresh op, and on contexts with other compute/comm thread counts (GEMM workers split the
// columns: n = 129 and 1025 cover uneven slabs). Each result is also checked against the
// reference.
TEST_F(GemmRsDeterminism, SameBitsAcrossCallsOpsAndThreadCounts) {
  const int W = world_size(), r = world_rank();
  Context ctx(MPI_COMM_WORLD, test_options());
  ContextOptions o2 = test_options();
  o2.compute_threads = 2;
  o2.comm_threads = 2;
  Context ctx2(MPI_COMM_WORLD, o2);
  ContextOptions o3 = test_options();
  o3.compute_threads = 3;
  o3.comm_threads = 1;
  Context ctx3(MPI_COMM_WORLD, o3);
  // Copy offload forced on (the reduction of our block on a comm stream), read at creation.
  const char* saved = std::getenv("FLUXCPP_COPY_OFFLOAD");
  const std::string saved_value = saved != nullptr ? saved : "";
  setenv("FLUXCPP_COPY_OFFLOAD", "on", 1);
  Context ctx4(MPI_COMM_WORLD, o2);
  if (saved != nullptr)
    setenv("FLUXCPP_COPY_OFFLOAD", saved_value.c_str(), 1);
  else
    unsetenv("FLUXCPP_COPY_OFFLOAD");
  const int L = test_ranks_per_host();
  if (L > 0)
    for (const Context* c : {&ctx, &ctx2, &ctx3, &ctx4}) {
      EXPECT_EQ(c->host_id(), r / L) << "forced layout: rank " << r;
      EXPECT_EQ(c->host_rank(), r % L) << "forced layout: rank " << r;
    }

  std::vector<Problem> problems;
  for (auto [in, out] : kPairs)
    for (bool trans : {false, true}) problems.push_back({in, out, 129, 257, trans});
  problems.push_back({DType::kFloat32, DType::kFloat32, 1025, 8, false});
  const int64_t rows = 6, m = rows * W;
  int call = 500;
  for (const Problem& p : problems)
    for (bool with_bias : {true, false}) {
      const std::string tag = describe_w(p) + (with_bias ? " bias" : " no bias");
      Data d = make_data(p, m, call++), other = make_data(p, m, call++);
      GemmRs op(ctx, options_for(p, m));
      Bytes first = check_forward(op, p, rows, d, with_bias, tag + " first");
      Bytes again = check_forward(op, p, rows, d, with_bias, tag + " again");
      expect_same_bits(first, again, p.out, p.n, tag + " repeated call", "local row");
      check_forward(op, p, rows, other, with_bias, tag + " other data");
      Bytes after = check_forward(op, p, rows, d, with_bias, tag + " after other data");
      expect_same_bits(first, after, p.out, p.n, tag + " same data after other data", "local row");
      {
        GemmRs fresh(ctx, options_for(p, 2 * m));
        Bytes b = check_forward(fresh, p, rows, d, with_bias, tag + " fresh op");
        expect_same_bits(first, b, p.out, p.n, tag + " fresh op", "local row");
      }
      {
        GemmRs op2(ctx2, options_for(p, m));
        Bytes b = check_forward(op2, p, rows, d, with_bias, tag + " compute 2 comm 2");
        expect_same_bits(first, b, p.out, p.n, tag + " context compute_threads=2 comm_threads=2",
                         "local row");
      }
      {
        GemmRs op3(ctx3, options_for(p, m));
        Bytes b = check_forward(op3, p, rows, d, with_bias, tag + " compute 3 comm 1");
        expect_same_bits(first, b, p.out, p.n, tag + " context compute_threads=3 comm_threads=1",
                         "local row");
      }
      {
        GemmRs op4(ctx4, options_for(p, m));
        Bytes b = check_forward(op4, p, rows, d, with_bias, tag + " copy offload");
        expect_same_bits(first, b, p.out, p.n, tag + " context with FLUXCPP_COPY_OFFLOAD=on",
                         "local row");
      }
      if (any_rank(HasFailure())) return;  // uniform
    }
}

// ---- 4. benchmark paths: gemm-only and comm-only --------------------------------------------

class GemmRsPaths : public MpiTest {};

// gemm-only (local) followed by comm-only (collective) reduce-scatters the partials of that
// gemm-only: the output equals forward's on the same data bit for bit, with and without bias,
// at m == max_m and below, after a forward with other data, and after repeated gemm-only calls.
TEST_F(GemmRsPaths, GemmOnlyThenCommOnlyEqualsForward) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t max_rows = 5;
  int call = 900;
  bool trans = false;
  for (auto [in, out] : kPairs) {
    const Problem p{in, out, 37, 45, trans};
    trans = !trans;
    GemmRs op(ctx, options_for(p, max_rows * W));
    for (int64_t rows : {max_rows, int64_t{2}})
      for (bool with_bias : {true, false}) {
        const int64_t m = rows * W;
        const std::size_t count = static_cast<std::size_t>(rows * p.n), esz = dtype_size(out);
        const std::string tag =
            describe_w(p) + " m=" + std::to_string(m) + (with_bias ? " bias" : " no bias");
        Data d = make_data(p, m, call++), d2 = make_data(p, m, call++);
        const void* b = with_bias ? d.bias.data() : nullptr;

        // forward(d) first, then gemm-only(d) + comm-only: the same bits.
        Bytes want = check_forward(op, p, rows, d, with_bias, tag + " forward");
        // gemm-only is local: peers may still be reading this rank's partials of the forward.
        MPI_Barrier(MPI_COMM_WORLD);
        expect_no_throw([&] { op.forward_gemm_only(d.input.data(), m, d.weight.data()); },
                        tag + " gemm-only");
        Bytes got = poisoned_output(out, count);
        expect_no_throw([&] { op.forward_comm_only(m, b, got.data()); }, tag + " comm-only");
        expect_same_bits(want, got, out, p.n, tag + " gemm-only + comm-only vs forward",
                         "local row");
        expect_untouched(got, count * esz, tag + " comm-only");

        // forward(d), then gemm-only(d2) + comm-only must reduce d2's partials, not the
        // forward's; twice gemm-only (the benchmark loop) changes nothing.
        check_forward(op, p, rows, d, with_bias, tag + " forward before gemm-only(d2)");
        MPI_Barrier(MPI_COMM_WORLD);
        for (int rep = 0; rep < 2; ++rep)
          expect_no_throw([&] { op.forward_gemm_only(d2.input.data(), m, d2.weight.data()); },
                          tag + " gemm-only(d2) rep " + std::to_string(rep));
        Bytes got2 = poisoned_output(out, count);
        expect_no_throw(
            [&] { op.forward_comm_only(m, with_bias ? d2.bias.data() : nullptr, got2.data()); },
            tag + " comm-only(d2)");
        Reference ref2 = rs_reference(p, rows, d2.input, d2.weight, with_bias ? &d2.bias : nullptr);
        expect_close(ref2, got2, out, rows, p.n, tag + " gemm-only(d2) + comm-only",
                     world_rank() * rows);
        expect_untouched(got2, count * esz, tag + " comm-only(d2)");
        Bytes want2 = check_forward(op, p, rows, d2, with_bias, tag + " forward(d2)");
        expect_same_bits(want2, got2, out, p.n, tag + " gemm-only(d2) + comm-only vs forward(d2)",
                         "local row");
        if (any_rank(HasFailure())) return;  // uniform
      }
    // m == 0 on both paths is a no-op, with null pointers too.
    MPI_Barrier(MPI_COMM_WORLD);
    expect_no_throw([&] { op.forward_gemm_only(nullptr, 0, nullptr); },
                    describe_w(p) + " gemm-only m=0");
    expect_no_throw([&] { op.forward_comm_only(0, nullptr, nullptr); },
                    describe_w(p) + " comm-only m=0");
    Data d = make_data(p, max_rows * W, call++);
    check_forward(op, p, max_rows, d, true, describe_w(p) + " forward after m=0 paths");
    if (any_rank(HasFailure())) return;  // uniform
  }
}

// forward_gemm_only waits until host peers released this rank's partials after the last call
// that moved data: a no-op forward (m == 0) or a forward rejected with kInvalidArgument in
// between releases nothing, and gemm-only must not wait for it (it used to time out on every
// rank of a host with more than one rank). Each round: forward (data A), the in-between call,
// gemm-only (data B), comm-only, which must reduce B's partials: within tolerance of the
// reference and bit for bit forward(B)'s output. A short timeout makes a regression fail in
// seconds.
TEST_F(GemmRsPaths, GemmOnlyAfterNoOpOrRejectedCall) {
  Context ctx(MPI_COMM_WORLD, test_options(5.0));
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 3, m = rows * W;
  struct Between {
    const char* name;
    bool rejected;  // kInvalidArgument expected on every rank
    std::function<void(GemmRs&, const Data&, void*)> call;
  };
  std::vector<Between> betweens = {
      {"m=0 no-op", false,
       [&](GemmRs& op, const Data& d, void* out) {
         op.forward(d.input.data(), 0, d.weight.data(), d.bias.data(), out);
       }},
      {"m=0 no-op with null pointers", false,
       [&](GemmRs& op, const Data&, void*) { op.forward(nullptr, 0, nullptr, nullptr, nullptr); }},
      {"m > max_m everywhere (rejected)", true,
       [&](GemmRs& op, const Data& d, void* out) {
         op.forward(d.input.data(), m + W, d.weight.data(), d.bias.data(), out);
       }},
  };
  if (W > 1) {
    betweens.push_back(
        {"m % W != 0 everywhere (rejected)", true, [&](GemmRs& op, const Data& d, void* out) {
           op.forward(d.input.data(), W + 1, d.weight.data(), d.bias.data(), out);
         }});
    betweens.push_back(
        {"m differs on the last rank (rejected)", true, [&](GemmRs& op, const Data& d, void* out) {
           op.forward(d.input.data(), r == W - 1 ? 2 * W : W, d.weight.data(), d.bias.data(), out);
         }});
  }
  int call = 1300;
  // n >= m/W: one GEMM over all rows; n < m/W: block by block.
  for (int64_t n : {int64_t{17}, int64_t{2}}) {
    const Problem p{DType::kFloat32, DType::kFloat32, n, 11, n == 2};
    GemmRs op(ctx, options_for(p, m));
    const std::size_t count = static_cast<std::size_t>(rows * p.n), esz = dtype_size(p.out);
    for (const Between& between : betweens) {
      const std::string tag = describe_w(p) + " m=" + std::to_string(m) + " after " + between.name;
      Data a = make_data(p, m, call++), b = make_data(p, m, call++);
      Data scratch = make_data(p, m + W, call++);  // room for the largest m named (m + W)
      Bytes scratch_out = poisoned_output(p.out, static_cast<std::size_t>((rows + 1) * p.n));
      check_forward(op, p, rows, a, true, tag + " forward (data A)");
      if (between.rejected) {
        expect_error([&] { between.call(op, scratch, scratch_out.data()); }, Errc::kInvalidArgument,
                     {"gemm_rs"}, tag);
      } else {
        expect_no_throw([&] { between.call(op, scratch, scratch_out.data()); }, tag);
      }
      expect_untouched(scratch_out, 0, tag + " (in-between call)");
      expect_no_throw([&] { op.forward_gemm_only(b.input.data(), m, b.weight.data()); },
                      tag + " gemm-only (data B)");
      Bytes got = poisoned_output(p.out, count);
      expect_no_throw([&] { op.forward_comm_only(m, b.bias.data(), got.data()); },
                      tag + " comm-only");
      expect_untouched(got, count * esz, tag + " comm-only");
      Reference ref = rs_reference(p, rows, b.input, b.weight, &b.bias);
      expect_close(ref, got, p.out, rows, p.n, tag + " gemm-only (data B) + comm-only",
                   world_rank() * rows);
      got.resize(count * esz);
      Bytes want = check_forward(op, p, rows, b, true, tag + " forward (data B)");
      expect_same_bits(want, got, p.out, p.n, tag + " gemm-only + comm-only vs forward(B)",
                       "local row");
      if (any_rank(HasFailure())) return;  // uniform
    }
  }
}

// ---- 5. bad inputs ----------------------------------------------------------------------------

class GemmRsBadInput : public MpiTest {};

TEST_F(GemmRsBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 4;
  for (bool trans : {false, true}) {
    const Problem p{DType::kFloat32, DType::kFloat32, 24, 16, trans};
    const std::string tag = describe_w(p);
    GemmRs op(ctx, options_for(p, rows * W));
    Data d = make_data(p, (rows + 1) * W, 0);  // room for one extra row per rank
    Bytes out(static_cast<std::size_t>((rows + 1) * p.n) * 4);
    const void* in = d.input.data();
    const void* w = d.weight.data();
    const void* b = d.bias.data();
    void* o = out.data();
    const std::vector<std::string> needle{"gemm_rs"};
    if (W > 1)
      expect_error([&] { op.forward(in, W + 1, w, b, o); }, Errc::kInvalidArgument, needle,
                   tag + " m % W != 0");
    expect_error([&] { op.forward(in, (rows + 1) * W, w, b, o); }, Errc::kInvalidArgument, needle,
                 tag + " m > max_m");
    expect_error([&] { op.forward(in, -W, w, b, o); }, Errc::kInvalidArgument, needle,
                 tag + " m < 0");
    expect_error([&] { op.forward(r == W - 1 ? nullptr : in, W, w, b, o); }, Errc::kInvalidArgument,
                 needle, tag + " NULL input on the last rank");
    expect_error([&] { op.forward(in, W, r == 0 ? nullptr : w, b, o); }, Errc::kInvalidArgument,
                 needle, tag + " NULL weight on rank 0");
    expect_error([&] { op.forward(in, W, w, b, r == 0 ? nullptr : o); }, Errc::kInvalidArgument,
                 needle, tag + " NULL output on rank 0");
    expect_error([&] { op.forward(nullptr, W, nullptr, b, nullptr); }, Errc::kInvalidArgument,
                 needle, tag + " NULL everything everywhere");
    if (W > 1)
      expect_error([&] { op.forward(in, r == W - 1 ? 2 * W : W, w, b, o); }, Errc::kInvalidArgument,
                   needle, tag + " ranks pass different m");
    if (W > 1)  // whether a bias was passed is agreed
      expect_error([&] { op.forward(in, W, w, r == 0 ? b : nullptr, o); }, Errc::kInvalidArgument,
                   {"gemm_rs: ranks disagree on bias"}, tag + " a bias on rank 0 only");
    // The benchmark paths reject an m beyond max_m as well (on every rank: same m everywhere).
    expect_error([&] { op.forward_gemm_only(in, (rows + 1) * W, w); }, Errc::kInvalidArgument,
                 needle, tag + " gemm-only m > max_m");
    expect_error([&] { op.forward_comm_only((rows + 1) * W, b, o); }, Errc::kInvalidArgument,
                 needle, tag + " comm-only m > max_m");
    // m == 0 with null pointers is a no-op.
    expect_no_throw([&] { op.forward(nullptr, 0, nullptr, nullptr, nullptr); }, tag + " m == 0");
    // Still usable after all of that, twice, at full and partial m.
    for (int call = 1; call <= 2; ++call) {
      const int64_t good_rows = call == 1 ? rows : 1;
      Data good = make_data(p, good_rows * W, call);
      check_forward(op, p, good_rows, good, true, tag + " good forward after errors");
    }
    if (any_rank(HasFailure())) return;  // uniform
  }
}

TEST_F(GemmRsBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const Problem base{DType::kFloat32, DType::kFloat32, 24, 16, false};
  auto create = [&](GemmRsOptions o) { GemmRs op(ctx, o); };
  const GemmRsOptions good = options_for(base, 4 * W);
  const std::vector<std::string> needle{"gemm_rs"};
  if (W > 1) {
    GemmRsOptions o = good;
    if (r == W - 1) o.k = 17;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "k differs");
    o = good;
    if (r == 0) o.n = 25;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "n differs");
    o = good;
    if (r == W - 1) o.transpose_weight = true;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "transpose_weight differs");
    o = good;
    if (r == 0) o.max_m = 8 * W;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "max_m differs");
    o = good;
    if (r == W - 1) {
      o.input_dtype = DType::kFloat64;
      o.output_dtype = DType::kFloat64;
    }
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "dtypes differ");
    o = good;
    if (r == 0) o.input_dtype = DType::kBFloat16;  // bf16 -> f32 (valid) vs f32 -> f32
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "input dtype differs");
    o = good;
    if (r == W - 1) o.k = 0;  // invalid on one rank only
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "k = 0 on the last rank");
  }
  const std::pair<DType, DType> bad_pairs[] = {{DType::kBFloat16, DType::kFloat64},
                                               {DType::kFloat32, DType::kBFloat16},
                                               {DType::kFloat32, DType::kFloat64},
                                               {DType::kFloat64, DType::kFloat32},
                                               {DType::kFloat64, DType::kBFloat16}};
  for (auto [in, out] : bad_pairs) {
    GemmRsOptions o = good;
    o.input_dtype = in;
    o.output_dtype = out;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle,
                 std::string("pair ") + dtype_name(in) + " -> " + dtype_name(out));
  }
  {
    GemmRsOptions o = good;
    if (r == 0) o.output_dtype = DType::kBFloat16;  // invalid pair on rank 0 only
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "invalid pair on rank 0 only");
    o = good;
    o.n = 0;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "n = 0");
    o = good;
    o.n = -5;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "n < 0");
    o = good;
    o.k = 0;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "k = 0");
    o = good;
    o.k = -3;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, needle, "k < 0");
  }
  // A good op on the same context still works.
  if (!any_rank(HasFailure())) {
    GemmRs op(ctx, good);
    Data d = make_data(base, 4 * W, 3);
    check_forward(op, base, 4, d, true, "good op after create errors");
  }
}

// ---- 6. lifetime --------------------------------------------------------------------------------

class GemmRsLifetime : public MpiTest {};

// A moved op works; an op outlives the Context it was planned on.
TEST_F(GemmRsLifetime, MovedOpAndOpOutlivingItsContext) {
  const int W = world_size();
  const int64_t rows = 3;
  const Problem p{DType::kBFloat16, DType::kFloat32, 19, 23, true};
  auto ctx = std::make_unique<Context>(MPI_COMM_WORLD, test_options());
  GemmRs a(*ctx, options_for(p, rows * W));
  GemmRs b(std::move(a));
  check_forward(b, p, rows, make_data(p, rows * W, 1), true, "move-constructed op");
  GemmRs c(*ctx, options_for(Problem{DType::kFloat64, DType::kFloat64, 5, 7, false}, W));
  c = std::move(b);
  EXPECT_EQ(c.options().n, p.n);
  check_forward(c, p, rows, make_data(p, rows * W, 2), false, "move-assigned op");
  ctx.reset();
  check_forward(c, p, rows, make_data(p, rows * W, 3), true, "op after its Context is gone");
}

}  // namespace
}  // namespace fluxcpp::test
