// GemmAr (GEMM fused with a deterministic all-reduce) against the unfused reference computed
// here: every rank forms its partial input_s · weight_sᵀ in double (cblas, one BLAS thread),
// MPI_Allreduce sums them, the bias is added once. Results lie within a tolerance scaled with
// k·W, and are bitwise identical on every rank and across repeated calls (with a packed weight
// too).
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// Σ_s input_s · op(weight_s) (+ bias once), [m, n], with gemm_tolerance over k·W terms.
Reference ar_reference(const Problem& p, int64_t m, const Bytes& input, const Bytes& weight,
                       const Bytes* bias) {
  const int W = world_size();
  const int64_t n = p.n, k = p.k;
  const std::size_t mn = static_cast<std::size_t>(m * n);
  Reference ref{std::vector<double>(mn, 0.0), std::vector<double>(mn, 0.0)};
  if (m == 0) return ref;
  std::vector<double> a = widen_f64(input, p.in, static_cast<std::size_t>(m * k));
  std::vector<double> w = widen_f64(weight, p.in, static_cast<std::size_t>(n * k));
  std::vector<double> a_abs(a.size()), w_abs(w.size());
  for (std::size_t i = 0; i < a.size(); ++i) a_abs[i] = std::fabs(a[i]);
  for (std::size_t i = 0; i < w.size(); ++i) w_abs[i] = std::fabs(w[i]);
  std::vector<double> both(2 * mn), sum(2 * mn);
  {
    OneBlasThread one;
    const CBLAS_TRANSPOSE tb = p.transpose_weight ? CblasNoTrans : CblasTrans;
    const auto ldb = static_cast<blasint>(p.transpose_weight ? n : k);
    const auto M = static_cast<blasint>(m), N = static_cast<blasint>(n),
               K = static_cast<blasint>(k);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, 1.0, a.data(), K, w.data(), ldb, 0.0,
                both.data(), N);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, M, N, K, 1.0, a_abs.data(), K, w_abs.data(), ldb,
                0.0, both.data() + mn, N);
  }
  MPI_Allreduce(both.data(), sum.data(), static_cast<int>(2 * mn), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  for (std::size_t i = 0; i < mn; ++i) {
    const double b = bias ? load(bias->data(), p.out, i % static_cast<std::size_t>(n)) : 0.0;
    ref.value[i] = sum[i] + b;
    ref.tol[i] = gemm_tolerance(p.in, p.out, k * W, sum[mn + i] + std::fabs(b), ref.value[i]);
  }
  return ref;
}

struct Data {
  Bytes input, weight, bias;
};

Data make_data(const Problem& p, int64_t m, int call) {
  const int r = world_rank();
  return {random_tensor(p.in, static_cast<std::size_t>(m * p.k), seed_of(r, call, 1)),
          random_tensor(p.in, static_cast<std::size_t>(p.n * p.k), seed_of(r, call, 2)),
          random_tensor(p.out, static_cast<std::size_t>(p.n), seed_of(0, call, 3))};
}

// One forward (with a packed weight when given), checked against the reference, for writes past
// [m, n], and for the same bits on every rank. Returns the output. Collective.
Bytes check_forward(GemmAr& op, const Problem& p, int64_t m, const Data& d, bool with_bias,
                    const std::string& what, const PackedWeight* packed = nullptr) {
  const std::size_t count = static_cast<std::size_t>(m * p.n), esz = dtype_size(p.out);
  const Reference ref = ar_reference(p, m, d.input, d.weight, with_bias ? &d.bias : nullptr);
  Bytes out = poisoned_output(p.out, count);
  const void* in = d.input.empty() ? nullptr : d.input.data();
  const void* bias = with_bias ? d.bias.data() : nullptr;
  const bool ok = expect_no_throw(
      [&] {
        if (packed != nullptr)
          op.forward(in, m, *packed, bias, out.data());
        else
          op.forward(in, m, d.weight.data(), bias, out.data());
      },
      what + " forward");
  if (ok) {
    expect_close(ref, out, p.out, m, p.n, what);
    expect_untouched(out, count * esz, what);
  }
  expect_same_on_every_rank(out, count * esz, what);
  out.resize(count * esz);
  return out;
}

class GemmArTest : public MpiTest, public ::testing::WithParamInterface<GemmShape> {};

// Both weight layouts, with and without bias; m is the total row count (no divisibility); the
// same data twice gives the same bits, and so does a packed weight.
TEST_P(GemmArTest, MatchesPartialGemmsThenAllReduce) {
  const GemmShape s = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  int call = 0;
  for (bool trans : {false, true}) {
    const Problem p{s.in, s.out, s.n, s.k, trans};
    const int64_t max_m = std::max<int64_t>(s.rows, 1) + (trans ? 2 : 0);
    GemmAr op(ctx, gemm_op_options<GemmArOptions>(p, max_m));
    EXPECT_EQ(op.options().max_m, max_m);
    for (bool with_bias : {true, false}) {
      const std::string what =
          describe(p) + (with_bias ? " bias" : " no bias") + " m=" + std::to_string(s.rows) +
          " W=" + std::to_string(world_size()) + " call " + std::to_string(call);
      const Data d = make_data(p, s.rows, call++);
      const Bytes first = check_forward(op, p, s.rows, d, with_bias, what);
      const Bytes again = check_forward(op, p, s.rows, d, with_bias, what + " again");
      EXPECT_EQ(first, again) << what << ": rank " << world_rank() << ": bits changed";
      if (with_bias && p.in != DType::kFloat64) {  // f32 and bf16 weights pack
        PackedWeight packed(ctx, p.in, d.weight.data(), p.n, p.k, trans);
        // A packed weight may take other kernels (other bits); its result is checked against
        // the reference, for the same bits on every rank and from call to call.
        const Bytes pk = check_forward(op, p, s.rows, d, with_bias, what + " packed", &packed);
        const Bytes pk2 =
            check_forward(op, p, s.rows, d, with_bias, what + " packed again", &packed);
        EXPECT_EQ(pk, pk2) << what << ": rank " << world_rank() << ": packed bits changed";
      }
    }
    if (any_rank(HasFailure())) return;  // uniform
  }
}

std::vector<GemmShape> shapes() {
  std::vector<GemmShape> v;
  for (auto [in, out] : kPairs) {
    for (int64_t rows : {0, 1, 5})
      for (int64_t n : {1, 127})
        for (int64_t k : {3, 127}) v.push_back({in, out, rows, n, k});
    v.push_back({in, out, 8, 1024, 256});  // decode: one-shot or two-shot by dtype
    v.push_back({in, out, 67, 300, 200});  // two-shot, odd m
    // Two GEMM calls (131 and 130 rows) where one rank per host streams the partial to the other
    // hosts half by half: in the runs with one rank per host (hosts4). m·n makes each half
    // several messages of the all-reduce's pieces.
    if (test_ranks_per_host() == 1) v.push_back({in, out, 261, 1024, 1536});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmArTest, ::testing::ValuesIn(shapes()), gemm_shape_test_name);

class GemmArBadInput : public MpiTest {};

TEST_F(GemmArBadInput, ErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const Problem p{DType::kBFloat16, DType::kFloat32, 16, 8, false};
  const std::vector<std::string> ar = {"gemm_ar"};
  auto create = [&](GemmArOptions o) { GemmAr op(ctx, o); };
  GemmArOptions bad = gemm_op_options<GemmArOptions>(p, 4);
  bad.output_dtype = DType::kFloat64;
  expect_error([&] { create(bad); }, Errc::kInvalidArgument, {"gemm_ar: (input, output) dtypes"},
               "bad dtype pair");
  if (W > 1) {
    GemmArOptions o = gemm_op_options<GemmArOptions>(p, 4);
    if (r == W - 1) o.k = 9;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"gemm_ar", "k"}, "k differs");
  }
  GemmAr op(ctx, gemm_op_options<GemmArOptions>(p, 4));
  const Data d = make_data(p, 4, 1);
  Bytes out(4 * 16 * 4 * 2, 0);
  expect_error([&] { op.forward(d.input.data(), 5, d.weight.data(), nullptr, out.data()); },
               Errc::kInvalidArgument, {"gemm_ar: m=5 must be in [0, max_m=4]"}, "m > max_m");
  expect_error(
      [&] {
        op.forward(d.input.data(), 3, r == 0 ? nullptr : d.weight.data(), nullptr, out.data());
      },
      Errc::kInvalidArgument, ar, "NULL weight on rank 0");
  if (W > 1)
    expect_error(
        [&] { op.forward(d.input.data(), r == 0 ? 2 : 3, d.weight.data(), nullptr, out.data()); },
        Errc::kInvalidArgument, ar, "different m");
  if (W > 1) {  // a bias on one rank only: agreed, never rank 0's choice alone
    const std::vector<float> bias(16, 1.0f);
    expect_error(
        [&] {
          op.forward(d.input.data(), 4, d.weight.data(), r == W - 1 ? bias.data() : nullptr,
                     out.data());
        },
        Errc::kInvalidArgument, {"gemm_ar: ranks disagree on bias"},
        "a bias on the last rank only");
  }
  expect_no_throw([&] { op.forward(nullptr, 0, nullptr, nullptr, nullptr); }, "m == 0");
  check_forward(op, p, 4, d, true, "good forward after errors");
}

}  // namespace
}  // namespace fluxcpp::test
