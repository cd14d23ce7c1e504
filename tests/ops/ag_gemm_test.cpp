// AgGemm (all-gather fused with GEMM, column-parallel linear) against the unfused reference
// computed here: MPI_Allgather of the inputs, then one plain cblas GEMM (+ bias).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "ops/ag_gemm.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

const char* mode_name(AgGemmMode m) {
  switch (m) {
    case AgGemmMode::kAuto: return "auto";
    case AgGemmMode::kZeroCopy: return "zero_copy";
    case AgGemmMode::kCopy: return "copy";
  }
  return "?";
}

// Bitwise comparison; reports the first differing byte. Returns true if equal.
bool expect_same_bytes(const Bytes& want, const Bytes& got, std::size_t row_bytes,
                       const std::string& what) {
  if (want.size() != got.size()) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": size " << got.size()
                  << " != " << want.size();
    return false;
  }
  for (std::size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i]) {
      ADD_FAILURE() << what << ": rank " << world_rank() << ": gathered_input differs at row "
                    << i / row_bytes << " byte " << i % row_bytes << ": expected " << int(want[i])
                    << ", got " << int(got[i]);
      return false;
    }
  return true;
}

// The tensors of one forward on this rank.
struct Data {
  Bytes input, weight, bias;
};

Data make_data(const Problem& p, int64_t rows, int call) {
  const int r = world_rank();
  Data d;
  d.input = random_tensor(p.in, static_cast<std::size_t>(rows * p.k), seed_of(r, call, 1));
  d.weight = random_tensor(p.in, static_cast<std::size_t>(p.n * p.k), seed_of(r, call, 2));
  d.bias = random_tensor(p.out, static_cast<std::size_t>(p.n), seed_of(r, call, 3));
  return d;
}

// gathered_input buffers start as 0xEE bytes (outputs: kPoison, all-ones).
constexpr unsigned char kGatherPoison = 0xEE;

// One forward of `op` on `d` (rows per rank `rows`), checked against the reference. Collective.
// Returns false (on this rank) if anything failed. With m == 0 the (one-element) output and
// gathered_input buffers must come back untouched.
bool check_forward(AgGemm& op, const Problem& p, int64_t rows, const Data& d, bool with_bias,
                   bool with_gathered, const std::string& what) {
  const int W = world_size();
  const int64_t m = rows * W;
  const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(p.in);
  const std::size_t out_elems = static_cast<std::size_t>(m * p.n);
  Bytes gathered_ref = mpi_allgather(d.input, rows, in_row);
  Bytes out(std::max<std::size_t>(out_elems, 1) * dtype_size(p.out), kPoison);
  Bytes gathered(std::max<std::size_t>(static_cast<std::size_t>(m) * in_row, 1), kGatherPoison);
  if (!expect_no_throw(
          [&] {
            op.forward(d.input.empty() ? nullptr : d.input.data(), m, d.weight.data(),
                       with_bias ? d.bias.data() : nullptr, out.data(),
                       with_gathered ? gathered.data() : nullptr);
          },
          what + " forward"))
    return false;
  if (m == 0) {
    bool untouched =
        out == Bytes(out.size(), kPoison) && gathered == Bytes(gathered.size(), kGatherPoison);
    if (!untouched) ADD_FAILURE() << what << ": rank " << world_rank() << ": m == 0 wrote data";
    return untouched;
  }
  bool ok = true;
  if (with_gathered) ok = expect_same_bytes(gathered_ref, gathered, in_row, what) && ok;
  Reference ref = reference(p, m, gathered_ref, d.weight, with_bias ? &d.bias : nullptr);
  if (expect_close(ref, out, p.out, m, p.n, what) != 0) ok = false;
  return ok;
}

AgGemmOptions options_for(const Problem& p, int64_t max_m, AgGemmMode mode) {
  AgGemmOptions o = gemm_op_options<AgGemmOptions>(p, max_m);
  o.mode = mode;
  return o;
}

// ---- 1. correctness over shapes, dtype pairs, layouts, bias, gathered_input, modes --------

class AgGemmTest : public MpiTest, public ::testing::WithParamInterface<GemmShape> {};

// For both weight layouts and both explicit modes, one op each; four forwards on it: with and
// without bias, with and without gathered_input, fresh data every call.
TEST_P(AgGemmTest, MatchesAllgatherThenGemm) {
  const GemmShape s = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  int call = 0;
  bool failed = false;
  for (bool trans : {false, true})
    for (AgGemmMode mode : {AgGemmMode::kZeroCopy, AgGemmMode::kCopy}) {
      if (failed) break;
      const Problem p{s.in, s.out, s.n, s.k, trans};
      const int64_t max_m = std::max<int64_t>(s.rows, 1) * W;
      AgGemm op(ctx, options_for(p, max_m, mode));
      for (bool with_bias : {true, false})
        for (bool with_gathered : {true, false}) {
          const std::string what =
              describe(p) + " mode=" + mode_name(mode) + (with_bias ? " bias" : " no bias") +
              (with_gathered ? " gathered" : "") + " m=" + std::to_string(s.rows * W) + " call " +
              std::to_string(call);
          Data d = make_data(p, s.rows, call++);
          check_forward(op, p, s.rows, d, with_bias, with_gathered, what);
        }
      failed = any_rank(HasFailure());  // uniform: every rank stops together
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AgGemmTest, ::testing::ValuesIn(small_shapes(96, 200, 300)),
                         gemm_shape_test_name);

// FLUX's default test shape (M 4096, N 49152, K 12288) divided by 8: M = 512 rows in total,
// N = 6144 split over the ranks, K = 1536; bias on, gathered_input on, one call per case.
struct BigCase {
  DType in, out;
  AgGemmMode mode;
  bool transpose_weight;
};

void PrintTo(const BigCase& c, std::ostream* os) {
  *os << dtype_name(c.in) << "->" << dtype_name(c.out) << " mode=" << mode_name(c.mode)
      << (c.transpose_weight ? " weight[k,n]" : " weight[n,k]");
}

class AgGemmBig : public MpiTest, public ::testing::WithParamInterface<BigCase> {};

TEST_P(AgGemmBig, FluxDefaultShapeOverEight) {
  const BigCase c = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options(60.0));
  const int W = ctx.world_size();
  const int64_t rows = 512 / W, n = 6144 / W, k = 1536;
  const Problem p{c.in, c.out, n, k, c.transpose_weight};
  AgGemm op(ctx, options_for(p, rows * W, c.mode));
  Data d = make_data(p, rows, 0);
  check_forward(
      op, p, rows, d, true, true,
      "big " + describe(p) + " mode=" + mode_name(c.mode) + " m=" + std::to_string(rows * W));
}

INSTANTIATE_TEST_SUITE_P(
    Flux, AgGemmBig,
    ::testing::Values(BigCase{DType::kFloat32, DType::kFloat32, AgGemmMode::kZeroCopy, false},
                      BigCase{DType::kFloat32, DType::kFloat32, AgGemmMode::kCopy, false},
                      BigCase{DType::kBFloat16, DType::kBFloat16, AgGemmMode::kZeroCopy, true},
                      BigCase{DType::kBFloat16, DType::kBFloat16, AgGemmMode::kCopy, false}),
    [](const ::testing::TestParamInfo<BigCase>& i) {
      return std::string(dtype_name(i.param.in)) + "_" + dtype_name(i.param.out) + "_" +
             mode_name(i.param.mode) + (i.param.transpose_weight ? "_wT" : "");
    });

// ---- 2. many consecutive calls --------------------------------------------------------------

class AgGemmCalls : public MpiTest, public ::testing::WithParamInterface<AgGemmMode> {};

// 200 forwards on one op, reusing the same buffers with new contents every call: inputs, weights
// and bias all change, m changes (including 0), bias and gathered_input come and go. A stale
// row, a cached weight or an early read shows up as a mismatch.
TEST_P(AgGemmCalls, TwoHundredCallsWithChangingDataAndWeights) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t max_rows = 8;
  const Problem p{DType::kFloat32, DType::kFloat32, 24, 40, false};
  AgGemm op(ctx, options_for(p, max_rows * W, GetParam()));
  const int64_t rows_cycle[] = {8, 1, 0, 3, 8, 5, 7, 2};
  const std::size_t in_row = static_cast<std::size_t>(p.k) * 4;
  Bytes input(max_rows * in_row), weight(static_cast<std::size_t>(p.n * p.k) * 4),
      bias(static_cast<std::size_t>(p.n) * 4);
  Bytes out(static_cast<std::size_t>(max_rows * W * p.n) * 4),
      gathered(static_cast<std::size_t>(max_rows * W) * in_row);
  for (int call = 0; call < 200; ++call) {
    const int64_t rows = rows_cycle[call % 8], m = rows * W;
    const bool with_bias = call % 3 != 1, with_gathered = call % 2 == 0;
    refill(input, p.in, static_cast<std::size_t>(rows * p.k), seed_of(r, call, 1));
    refill(weight, p.in, static_cast<std::size_t>(p.n * p.k), seed_of(r, call, 2));
    refill(bias, p.out, static_cast<std::size_t>(p.n), seed_of(r, call, 3));
    std::fill(out.begin(), out.end(), kPoison);
    std::fill(gathered.begin(), gathered.end(), kGatherPoison);
    const std::string what = std::string("mode=") + mode_name(GetParam()) + " call " +
                             std::to_string(call) + " m=" + std::to_string(m);
    Bytes mine(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(rows * in_row));
    Bytes gathered_ref = mpi_allgather(mine, rows, in_row);
    expect_no_throw(
        [&] {
          op.forward(input.data(), m, weight.data(), with_bias ? bias.data() : nullptr, out.data(),
                     with_gathered ? gathered.data() : nullptr);
        },
        what + " forward");
    if (!HasFailure()) {
      Bytes got(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(m * p.n * 4));
      Reference ref = reference(p, m, gathered_ref, weight, with_bias ? &bias : nullptr);
      expect_close(ref, got, p.out, m, p.n, what);
      // Nothing beyond the m rows is written (m == 0 is a no-op).
      for (std::size_t i = static_cast<std::size_t>(m * p.n) * 4; i < out.size(); ++i)
        if (out[i] != kPoison) {
          ADD_FAILURE() << what << ": rank " << r << ": output written beyond row " << m
                        << " (byte " << i << ")";
          break;
        }
      if (with_gathered) {
        Bytes g(gathered.begin(), gathered.begin() + static_cast<std::ptrdiff_t>(m * in_row));
        expect_same_bytes(gathered_ref, g, in_row, what);
        for (std::size_t i = static_cast<std::size_t>(m) * in_row; i < gathered.size(); ++i)
          if (gathered[i] != kGatherPoison) {
            ADD_FAILURE() << what << ": rank " << r << ": gathered_input written beyond row " << m;
            break;
          }
      }
    }
    if (any_rank(HasFailure())) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AgGemmCalls,
                         ::testing::Values(AgGemmMode::kAuto, AgGemmMode::kZeroCopy,
                                           AgGemmMode::kCopy),
                         [](const ::testing::TestParamInfo<AgGemmMode>& i) {
                           return std::string(mode_name(i.param));
                         });

// ---- 3. benchmark paths: gemm-only and comm-only --------------------------------------------

class AgGemmPaths : public MpiTest {};

TEST_F(AgGemmPaths, GemmOnlyAndCommOnly) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 16;
  int call = 100;
  for (auto [in, out] :
       {std::pair{DType::kFloat32, DType::kFloat32}, std::pair{DType::kFloat64, DType::kFloat64},
        std::pair{DType::kBFloat16, DType::kFloat32}})
    for (AgGemmMode mode : {AgGemmMode::kZeroCopy, AgGemmMode::kCopy, AgGemmMode::kAuto}) {
      const Problem p{in, out, 24, 40, false};
      const int64_t m = rows * W;
      const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(in);
      const std::size_t out_bytes = static_cast<std::size_t>(m * p.n) * dtype_size(out);
      const std::string tag = describe(p) + " mode=" + mode_name(mode);
      AgGemm op(ctx, options_for(p, m, mode));

      // comm-only: gathered_input bit-exact, twice with different data, then once without it.
      for (int rep = 0; rep < 2; ++rep) {
        Bytes input =
            random_tensor(in, static_cast<std::size_t>(rows * p.k), seed_of(r, call++, 1));
        Bytes ref = mpi_allgather(input, rows, in_row);
        Bytes gathered(ref.size(), kGatherPoison);
        expect_no_throw([&] { op.forward_comm_only(input.data(), m, gathered.data()); },
                        tag + " forward_comm_only");
        expect_same_bytes(ref, gathered, in_row, tag + " comm-only rep " + std::to_string(rep));
      }
      expect_no_throw(
          [&] {
            Bytes input =
                random_tensor(in, static_cast<std::size_t>(rows * p.k), seed_of(r, call++, 1));
            op.forward_comm_only(input.data(), m, nullptr);
          },
          tag + " forward_comm_only(null)");

      // A normal forward after comm-only is correct; gemm-only right after it (same input,
      // weight, bias) gives the same output within tolerance, twice.
      Data d = make_data(p, rows, call++);
      check_forward(op, p, rows, d, true, true, tag + " forward after comm-only");
      Reference ref = reference(p, m, mpi_allgather(d.input, rows, in_row), d.weight, &d.bias);
      for (int rep = 0; rep < 2; ++rep) {
        Bytes got(out_bytes, kPoison);
        expect_no_throw(
            [&] {
              op.forward_gemm_only(d.input.data(), m, d.weight.data(), d.bias.data(), got.data());
            },
            tag + " forward_gemm_only");
        expect_close(ref, got, out, m, p.n, tag + " gemm-only rep " + std::to_string(rep));
      }
      MPI_Barrier(MPI_COMM_WORLD);  // gemm-only does not synchronise; the next forward does

      // And the op is still fully usable afterwards, with new data.
      Data d2 = make_data(p, rows, call++);
      check_forward(op, p, rows, d2, false, true, tag + " forward after gemm-only");
      if (any_rank(HasFailure())) return;  // uniform
    }
}

// ---- 4. bad inputs ----------------------------------------------------------------------------

class AgGemmBadInput : public MpiTest {};

TEST_F(AgGemmBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 8;
  const Problem p{DType::kFloat32, DType::kFloat32, 24, 16, false};
  for (AgGemmMode mode : {AgGemmMode::kZeroCopy, AgGemmMode::kCopy}) {
    AgGemm op(ctx, options_for(p, rows * W, mode));
    const std::string tag = std::string("mode=") + mode_name(mode);
    Data d = make_data(p, rows + 1, 0);  // room for one extra row per rank
    Bytes out(static_cast<std::size_t>((rows + 1) * W * p.n) * 4),
        gathered(static_cast<std::size_t>((rows + 1) * W * p.k) * 4);
    const void* in = d.input.data();
    const void* w = d.weight.data();
    const void* b = d.bias.data();
    void* o = out.data();
    if (W > 1)
      expect_error([&] { op.forward(in, W + 1, w, b, o); }, Errc::kInvalidArgument, {"ag_gemm"},
                   tag + " m % W != 0");
    expect_error([&] { op.forward(in, (rows + 1) * W, w, b, o); }, Errc::kInvalidArgument,
                 {"ag_gemm"}, tag + " m > max_m");
    expect_error([&] { op.forward(r == W - 1 ? nullptr : in, W, w, b, o); }, Errc::kInvalidArgument,
                 {"ag_gemm"}, tag + " NULL input on the last rank");
    expect_error([&] { op.forward(in, W, r == 0 ? nullptr : w, b, o); }, Errc::kInvalidArgument,
                 {"ag_gemm"}, tag + " NULL weight on rank 0");
    expect_error([&] { op.forward(in, W, w, b, r == 0 ? nullptr : o); }, Errc::kInvalidArgument,
                 {"ag_gemm"}, tag + " NULL output on rank 0");
    expect_error([&] { op.forward(in, W, w, b, nullptr, gathered.data()); }, Errc::kInvalidArgument,
                 {"ag_gemm"}, tag + " NULL output everywhere");
    if (W > 1)
      expect_error([&] { op.forward(in, r == W - 1 ? 2 * W : W, w, b, o, gathered.data()); },
                   Errc::kInvalidArgument, {"ag_gemm"}, tag + " ranks pass different m");
    // m == 0 with null pointers is a no-op.
    expect_no_throw([&] { op.forward(nullptr, 0, nullptr, nullptr, nullptr, nullptr); },
                    tag + " m == 0");
    // Still usable after all of that, twice.
    for (int call = 1; call <= 2; ++call) {
      Data good = make_data(p, rows, call);
      check_forward(op, p, rows, good, true, true, tag + " good forward after errors");
    }
    if (any_rank(HasFailure())) return;  // uniform
  }
}

TEST_F(AgGemmBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const Problem base{DType::kFloat32, DType::kFloat32, 24, 16, false};
  auto create = [&](AgGemmOptions o) { AgGemm op(ctx, o); };
  const AgGemmOptions good = options_for(base, 4 * W, AgGemmMode::kAuto);
  if (W > 1) {
    AgGemmOptions o = good;
    if (r == W - 1) o.k = 17;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"}, "k differs");
    o = good;
    if (r == 0) o.n = 25;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"}, "n differs");
    o = good;
    if (r == W - 1) o.transpose_weight = true;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"},
                 "transpose_weight differs");
    o = good;
    if (r == 0) o.max_m = 8 * W;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"}, "max_m differs");
    o = good;
    if (r == W - 1) {
      o.input_dtype = DType::kFloat64;
      o.output_dtype = DType::kFloat64;
    }
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"}, "dtypes differ");
  }
  {
    AgGemmOptions o = good;
    o.input_dtype = DType::kBFloat16;
    o.output_dtype = DType::kFloat64;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"}, "pair bf16 -> f64");
    o.input_dtype = DType::kFloat32;
    o.output_dtype = DType::kBFloat16;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"}, "pair f32 -> bf16");
    o = good;
    if (r == 0) o.output_dtype = DType::kBFloat16;  // invalid pair on one rank only
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {"ag_gemm"},
                 "invalid pair on rank 0 only");
  }
  // A good op on the same context still works.
  if (!any_rank(HasFailure())) {
    AgGemm op(ctx, good);
    Data d = make_data(base, 4, 3);
    check_forward(op, base, 4, d, true, false, "good op after create errors");
  }
}

// ---- 5. every rank uses its own weight ------------------------------------------------------

class AgGemmShards : public MpiTest {};

// Rank r's weight is (r + 1) times a common base, so output_r ≈ (r + 1) · output_0: each rank's
// output must match its own weight and, on ranks other than 0, must not match rank 0's.
TEST_F(AgGemmShards, EachRankUsesItsOwnWeight) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 5;
  for (AgGemmMode mode : {AgGemmMode::kZeroCopy, AgGemmMode::kCopy}) {
    const Problem p{DType::kFloat32, DType::kFloat32, 12, 20, false};
    AgGemm op(ctx, options_for(p, rows * W, mode));
    const std::string tag = std::string("mode=") + mode_name(mode);
    Data d = make_data(p, rows, 7);
    Bytes base = random_tensor(p.in, static_cast<std::size_t>(p.n * p.k), seed_of(0, 99, 2));
    std::vector<float> w = widen_f32(base, p.in, static_cast<std::size_t>(p.n * p.k));
    for (float& x : w) x *= static_cast<float>(r + 1);
    std::memcpy(d.weight.data(), w.data(), d.weight.size());
    check_forward(op, p, rows, d, false, false, tag + " own weight");

    // Run again and compare against rank 0's weight: on other ranks it must not match.
    const int64_t m = rows * W;
    Bytes gathered_ref = mpi_allgather(d.input, rows, static_cast<std::size_t>(p.k) * 4);
    Bytes out(static_cast<std::size_t>(m * p.n) * 4, kPoison);
    expect_no_throw([&] { op.forward(d.input.data(), m, d.weight.data(), nullptr, out.data()); },
                    tag + " forward");
    if (r != 0) {
      Reference other = reference(p, m, gathered_ref, base, nullptr);
      int64_t same = 0;
      for (std::size_t i = 0; i < other.value.size(); ++i)
        if (std::fabs(load(out.data(), p.out, i) - other.value[i]) <= other.tol[i]) ++same;
      EXPECT_LT(same, static_cast<int64_t>(other.value.size()) / 2)
          << tag << ": rank " << r << ": the output matches rank 0's weight, not this rank's";
    }
    if (any_rank(HasFailure())) return;  // uniform
  }
}

// ---- 6. the latency path --------------------------------------------------------------------

class AgGemmLatency : public MpiTest {
 protected:
  void TearDown() override {
    detail::AgGemmImpl::enable_latency_path(true);
    MpiTest::TearDown();
  }
};

// Decode sizes on one host, and across hosts of one rank each (ag_gemm.np2.hosts2x1), take the
// latency path (the rows ride on the handshake, one GEMM over the gathered rows): the same bits as the normal path at the same m — output and gathered_input —
// on both sides of the threshold (m <= 128 rows in all), f32 and bf16, a plain, a packed and a
// zero-copy input; the gemm-only path after a latency call redoes its GEMM bit for bit.
TEST_F(AgGemmLatency, SameBitsAsTheNormalPath) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t at_threshold = 128 / W;  // the most rows per rank that stay at m <= 128
  int call = 300;
  for (auto [in, out] :
       {std::pair{DType::kFloat32, DType::kFloat32}, std::pair{DType::kBFloat16, DType::kBFloat16},
        std::pair{DType::kBFloat16, DType::kFloat32}})
    for (bool trans : {false, true}) {
      const Problem p{in, out, 160, 72, trans};
      const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(in);
      AgGemm op(ctx, options_for(p, (at_threshold + 1) * W, AgGemmMode::kAuto));
      for (int64_t rows : {int64_t{1}, int64_t{8}, at_threshold, at_threshold + 1})
        for (int variant = 0; variant < 3; ++variant) {  // plain, packed, zero-copy input
          const int64_t m = rows * W;
          const std::string what = describe(p) + " m=" + std::to_string(m) +
                                   (variant == 1   ? " packed"
                                    : variant == 2 ? " zero-copy"
                                                   : "");
          Data d = make_data(p, rows, call++);
          std::unique_ptr<PackedWeight> packed;
          if (variant == 1)
            packed = std::make_unique<PackedWeight>(ctx, in, d.weight.data(), p.n, p.k, trans);
          const std::size_t out_bytes = static_cast<std::size_t>(m * p.n) * dtype_size(out);
          auto run = [&](bool latency, Bytes& o, Bytes& g) {
            detail::AgGemmImpl::enable_latency_path(latency);
            o.assign(out_bytes, kPoison);
            g.assign(static_cast<std::size_t>(m) * in_row, kGatherPoison);
            expect_no_throw(
                [&] {
                  const void* input = d.input.data();
                  if (variant == 2) {
                    void* buf = op.input_buffer();
                    std::memcpy(buf, d.input.data(), d.input.size());
                    input = buf;
                  }
                  if (packed)
                    op.forward(input, m, *packed, d.bias.data(), o.data(), g.data());
                  else
                    op.forward(input, m, d.weight.data(), d.bias.data(), o.data(), g.data());
                },
                what + (latency ? " forward" : " forward (normal path)"));
          };
          Bytes out_fast, gathered_fast, out_normal, gathered_normal, out_again, gathered_again;
          run(true, out_fast, gathered_fast);
          if (variant == 0) {  // gemm-only redoes the last forward's GEMM on the gathered rows
            Bytes g(out_bytes, kPoison);
            expect_no_throw(
                [&] {
                  op.forward_gemm_only(d.input.data(), m, d.weight.data(), d.bias.data(), g.data());
                },
                what + " gemm-only");
            EXPECT_TRUE(g == out_fast) << what << ": rank " << world_rank()
                                       << ": gemm-only after the forward gives other bits";
            MPI_Barrier(MPI_COMM_WORLD);  // gemm-only does not synchronise
          }
          run(false, out_normal, gathered_normal);
          run(true, out_again, gathered_again);
          const Bytes gathered_ref = mpi_allgather(d.input, rows, in_row);
          expect_same_bytes(gathered_ref, gathered_fast, in_row, what);
          expect_same_bytes(gathered_ref, gathered_normal, in_row, what + " (normal path)");
          EXPECT_TRUE(out_fast == out_normal)
              << what << ": rank " << world_rank() << ": the two paths give other bits";
          EXPECT_TRUE(out_fast == out_again)
              << what << ": rank " << world_rank() << ": a repeated call gives other bits";
          Reference ref = reference(p, m, gathered_ref, d.weight, &d.bias);
          expect_close(ref, out_fast, out, m, p.n, what);
          if (any_rank(HasFailure())) return;  // uniform
        }
    }
}

}  // namespace
}  // namespace fluxcpp::test

namespace fluxcpp::test {
namespace {

class AgGemmWorkers : public MpiTest {};

// GEMMs split over several compute workers by column slabs: every column must be computed,
// whatever n % workers is (n = 129 with 2 workers once left the last column unwritten).
TEST_F(AgGemmWorkers, ColumnSlabsCoverEveryColumn) {
  for (int threads : {2, 3}) {
    Context ctx(MPI_COMM_WORLD, threaded_options(threads));
    for (int64_t n : {129, 193, 1025}) {
      for (AgGemmMode mode : {AgGemmMode::kZeroCopy, AgGemmMode::kCopy}) {
        const Problem p{DType::kFloat32, DType::kFloat32, n, 8, false};
        const int64_t rows = 4;
        AgGemm op(ctx, options_for(p, rows * ctx.world_size(), mode));
        Data d = make_data(p, rows, static_cast<int>(n) + threads);
        check_forward(op, p, rows, d, true, false,
                      "threads=" + std::to_string(threads) + " n=" + std::to_string(n) +
                          " mode=" + mode_name(mode));
      }
    }
  }
}

}  // namespace
}  // namespace fluxcpp::test
