// A2aGemm (all-to-all with equal splits fused with the GEMM that consumes it) against the unfused
// reference computed here: an MPI all-to-all of the inputs, then one plain cblas GEMM (+ bias).
#include <algorithm>
#include <cmath>
#include <cstring>
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

// Outside the unnamed namespace: gtest finds it by argument-dependent lookup, in Problem's own
// namespace.
void PrintTo(const Problem& p, std::ostream* os) {
  *os << describe(p);
}

namespace {

// ---- the unfused reference: MPI all-to-all, then reference() ----------------------------

// The all-to-all of `input` ([rows * W, ·] rows of row_bytes bytes): block t of rows rows goes to
// rank t (mpi_alltoallv with every split equal).
Bytes mpi_alltoall(const Bytes& input, int64_t rows, std::size_t row_bytes) {
  const std::vector<int64_t> splits(static_cast<std::size_t>(world_size()), rows);
  return mpi_alltoallv(input, splits, splits, row_bytes);
}

// Bitwise comparison of a2a_output; reports the first differing byte as (sender, row of its
// block, byte in row). Returns true if equal.
bool expect_same_a2a(const Bytes& want, const Bytes& got, int64_t rows, std::size_t row_bytes,
                     const std::string& what) {
  if (got.size() < want.size()) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": a2a_output too small";
    return false;
  }
  for (std::size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i]) {
      const std::size_t row = i / row_bytes;
      ADD_FAILURE() << what << ": rank " << world_rank() << ": a2a_output differs in the block of "
                    << "rank " << row / static_cast<std::size_t>(rows) << ", row "
                    << row % static_cast<std::size_t>(rows) << " byte " << i % row_bytes
                    << ": expected " << int(want[i]) << ", got " << int(got[i]);
      return false;
    }
  return true;
}

// The tensors of one forward on this rank.
struct Data {
  Bytes input, weight, bias;
};

// rows: rows per block (m / W); the input has rows * W rows.
Data make_data(const Problem& p, int64_t rows, int call) {
  const int r = world_rank(), W = world_size();
  Data d;
  d.input = random_tensor(p.in, static_cast<std::size_t>(rows * W * p.k), seed_of(r, call, 1));
  d.weight = random_tensor(p.in, static_cast<std::size_t>(p.n * p.k), seed_of(r, call, 2));
  d.bias = random_tensor(p.out, static_cast<std::size_t>(p.n), seed_of(r, call, 3));
  return d;
}

// a2a_output buffers start as 0xEE bytes (outputs: kPoison, all-ones).
constexpr unsigned char kA2aPoison = 0xEE;

// One forward of `op` on `d` (rows per block `rows`), checked against the reference. Collective.
// Returns false (on this rank) if anything failed. With m == 0 the (one-element) output and
// a2a_output buffers must come back untouched. `out_got`, if given, receives the output.
bool check_forward(A2aGemm& op, const Problem& p, int64_t rows, const Data& d, bool with_bias,
                   bool with_a2a, const std::string& what, Bytes* out_got = nullptr) {
  const int W = world_size();
  const int64_t m = rows * W;
  const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(p.in);
  const std::size_t out_elems = static_cast<std::size_t>(m * p.n);
  Bytes a2a_ref = mpi_alltoall(d.input, rows, in_row);
  Bytes out(std::max<std::size_t>(out_elems, 1) * dtype_size(p.out), kPoison);
  Bytes a2a(std::max<std::size_t>(static_cast<std::size_t>(m) * in_row, 1), kA2aPoison);
  if (!expect_no_throw(
          [&] {
            op.forward(d.input.empty() ? nullptr : d.input.data(), m, d.weight.data(),
                       with_bias ? d.bias.data() : nullptr, out.data(),
                       with_a2a ? a2a.data() : nullptr);
          },
          what + " forward"))
    return false;
  if (out_got != nullptr) *out_got = out;
  if (m == 0) {
    bool untouched = out == Bytes(out.size(), kPoison) && a2a == Bytes(a2a.size(), kA2aPoison);
    if (!untouched) ADD_FAILURE() << what << ": rank " << world_rank() << ": m == 0 wrote data";
    return untouched;
  }
  bool ok = true;
  if (with_a2a) ok = expect_same_a2a(a2a_ref, a2a, rows, in_row, what) && ok;
  Reference ref = reference(p, m, a2a_ref, d.weight, with_bias ? &d.bias : nullptr);
  if (expect_close(ref, out, p.out, m, p.n, what) != 0) ok = false;
  return ok;
}

A2aGemmOptions options_for(const Problem& p, int64_t max_m) {
  return gemm_op_options<A2aGemmOptions>(p, max_m);
}

// ---- 1. correctness over shapes, dtype pairs, layouts, bias, a2a_output ----------------------

class A2aGemmTest : public MpiTest, public ::testing::WithParamInterface<GemmShape> {};

// For both weight layouts, one op each; four forwards on it: with and without bias, with and
// without a2a_output, fresh data every call.
TEST_P(A2aGemmTest, MatchesAlltoallThenGemm) {
  const GemmShape s = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  int call = 0;
  for (bool trans : {false, true}) {
    const Problem p{s.in, s.out, s.n, s.k, trans};
    const int64_t max_m = std::max<int64_t>(s.rows, 1) * W;
    A2aGemm op(ctx, options_for(p, max_m));
    for (bool with_bias : {true, false})
      for (bool with_a2a : {true, false}) {
        const std::string what =
            describe(p) + (with_bias ? " bias" : " no bias") + (with_a2a ? " a2a_output" : "") +
            " m=" + std::to_string(s.rows * W) + " call " + std::to_string(call);
        Data d = make_data(p, s.rows, call++);
        check_forward(op, p, s.rows, d, with_bias, with_a2a, what);
      }
    if (any_rank(HasFailure())) break;  // uniform: every rank stops together
  }
}

std::vector<GemmShape> shapes() {
  std::vector<GemmShape> v;
  for (auto [in, out] : kPairs) {
    v.push_back({in, out, 0, 3, 3});
    for (int64_t n : {1, 3, 127})
      for (int64_t k : {1, 3, 127}) v.push_back({in, out, 1, n, k});
    v.push_back({in, out, 3, 5, 17});
    v.push_back({in, out, 64, 96, 200});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, A2aGemmTest, ::testing::ValuesIn(shapes()), gemm_shape_test_name);

// ---- 2. many consecutive calls --------------------------------------------------------------

class A2aGemmCalls : public MpiTest, public ::testing::WithParamInterface<Problem> {};

// 200 forwards on one op, reusing the same buffers with new contents every call: inputs, weights
// and bias all change, m changes (including 0), bias and a2a_output come and go. A stale row, a
// cached weight or an early read shows up as a mismatch.
TEST_P(A2aGemmCalls, TwoHundredCallsWithChangingData) {
  const Problem p = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t max_rows = 8;  // per block
  A2aGemm op(ctx, options_for(p, max_rows * W));
  const int64_t rows_cycle[] = {8, 1, 0, 3, 8, 5, 7, 2};
  const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(p.in);
  const std::size_t osz = dtype_size(p.out);
  Bytes input(static_cast<std::size_t>(max_rows * W) * in_row),
      weight(static_cast<std::size_t>(p.n * p.k) * dtype_size(p.in)),
      bias(static_cast<std::size_t>(p.n) * osz);
  Bytes out(static_cast<std::size_t>(max_rows * W * p.n) * osz),
      a2a(static_cast<std::size_t>(max_rows * W) * in_row);
  for (int call = 0; call < 200; ++call) {
    const int64_t rows = rows_cycle[call % 8], m = rows * W;
    const bool with_bias = call % 3 != 1, with_a2a = call % 2 == 0;
    refill(input, p.in, static_cast<std::size_t>(m * p.k), seed_of(r, call, 1));
    refill(weight, p.in, static_cast<std::size_t>(p.n * p.k), seed_of(r, call, 2));
    refill(bias, p.out, static_cast<std::size_t>(p.n), seed_of(r, call, 3));
    std::fill(out.begin(), out.end(), kPoison);
    std::fill(a2a.begin(), a2a.end(), kA2aPoison);
    const std::string what = describe(p) + " call " + std::to_string(call) +
                             " m=" + std::to_string(m) + (with_bias ? " bias" : "") +
                             (with_a2a ? " a2a_output" : "");
    Bytes mine(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(m * in_row));
    Bytes a2a_ref = mpi_alltoall(mine, rows, in_row);
    expect_no_throw(
        [&] {
          op.forward(input.data(), m, weight.data(), with_bias ? bias.data() : nullptr, out.data(),
                     with_a2a ? a2a.data() : nullptr);
        },
        what + " forward");
    if (!HasFailure()) {
      Bytes got(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(m * p.n * osz));
      Reference ref = reference(p, m, a2a_ref, weight, with_bias ? &bias : nullptr);
      expect_close(ref, got, p.out, m, p.n, what);
      // Nothing beyond the m rows is written (m == 0 is a no-op).
      for (std::size_t i = static_cast<std::size_t>(m * p.n) * osz; i < out.size(); ++i)
        if (out[i] != kPoison) {
          ADD_FAILURE() << what << ": rank " << r << ": output written beyond row " << m
                        << " (byte " << i << ")";
          break;
        }
      if (with_a2a) {
        Bytes g(a2a.begin(), a2a.begin() + static_cast<std::ptrdiff_t>(m * in_row));
        expect_same_a2a(a2a_ref, g, rows, in_row, what);
        for (std::size_t i = static_cast<std::size_t>(m) * in_row; i < a2a.size(); ++i)
          if (a2a[i] != kA2aPoison) {
            ADD_FAILURE() << what << ": rank " << r << ": a2a_output written beyond row " << m;
            break;
          }
      } else if (a2a != Bytes(a2a.size(), kA2aPoison)) {
        ADD_FAILURE() << what << ": rank " << r << ": a2a_output written though not passed";
      }
    }
    if (any_rank(HasFailure())) break;  // uniform
  }
}

INSTANTIATE_TEST_SUITE_P(Problems, A2aGemmCalls,
                         ::testing::Values(Problem{DType::kFloat32, DType::kFloat32, 24, 40, false},
                                           Problem{DType::kBFloat16, DType::kFloat32, 17, 33,
                                                   true}),
                         [](const ::testing::TestParamInfo<Problem>& i) {
                           return std::string(dtype_name(i.param.in)) + "_" +
                                  dtype_name(i.param.out) + (i.param.transpose_weight ? "_wT" : "");
                         });

// ---- 3. benchmark paths: gemm-only and comm-only --------------------------------------------

class A2aGemmPaths : public MpiTest {};

TEST_F(A2aGemmPaths, GemmOnlyAndCommOnly) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 6;
  int call = 100;
  for (auto [in, out] : kPairs)
    for (bool trans : {false, true}) {
      const Problem p{in, out, 24, 40, trans};
      const int64_t m = rows * W;
      const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(in);
      const std::size_t out_bytes = static_cast<std::size_t>(m * p.n) * dtype_size(out);
      const std::string tag = describe(p);
      A2aGemm op(ctx, options_for(p, m));

      // comm-only: a2a_output bit-exact, twice with different data, then once without it.
      for (int rep = 0; rep < 2; ++rep) {
        Bytes input = random_tensor(in, static_cast<std::size_t>(m * p.k), seed_of(r, call++, 1));
        Bytes ref = mpi_alltoall(input, rows, in_row);
        Bytes a2a(ref.size(), kA2aPoison);
        expect_no_throw([&] { op.forward_comm_only(input.data(), m, a2a.data()); },
                        tag + " forward_comm_only");
        expect_same_a2a(ref, a2a, rows, in_row, tag + " comm-only rep " + std::to_string(rep));
      }
      expect_no_throw(
          [&] {
            Bytes input =
                random_tensor(in, static_cast<std::size_t>(m * p.k), seed_of(r, call++, 1));
            op.forward_comm_only(input.data(), m, nullptr);
          },
          tag + " forward_comm_only(null)");

      // comm-only and forward give the same a2a_output for the same input.
      {
        Data d = make_data(p, rows, call++);
        Bytes via_comm(static_cast<std::size_t>(m) * in_row, kA2aPoison);
        expect_no_throw([&] { op.forward_comm_only(d.input.data(), m, via_comm.data()); },
                        tag + " forward_comm_only");
        Bytes via_forward(via_comm.size(), kA2aPoison), o(out_bytes, kPoison);
        expect_no_throw(
            [&] {
              op.forward(d.input.data(), m, d.weight.data(), d.bias.data(), o.data(),
                         via_forward.data());
            },
            tag + " forward");
        expect_same_a2a(via_forward, via_comm, rows, in_row,
                        tag + " comm-only a2a_output vs forward's");
      }

      // A normal forward after comm-only is correct; gemm-only right after it (same input,
      // weight, bias) gives the same output within tolerance, twice.
      Data d = make_data(p, rows, call++);
      Bytes fwd_out;
      check_forward(op, p, rows, d, true, true, tag + " forward after comm-only", &fwd_out);
      Reference ref = reference(p, m, mpi_alltoall(d.input, rows, in_row), d.weight, &d.bias);
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

// The two row layouts of the GEMM: gather mode (n >= m/W: the exchanged rows are collected into
// one buffer and multiplied at once) and block mode (n < m/W: block by block). With W == 1 both
// are block mode.
struct PathsMode {
  const char* name;
  int64_t rows, n;  // rows per block
};
const PathsMode kPathsModes[] = {{"gather (n >= m/W)", 4, 8}, {"block (n < m/W)", 8, 4}};

// gemm-only takes its own block from the `input` it is given, the other blocks as the last
// exchange left them: after forward(A), gemm-only(B) gives B_own · weightᵀ + bias in the rows
// of this rank's block r and forward(A)'s output in every other block.
TEST_F(A2aGemmPaths, GemmOnlyUsesItsOwnInputBlock) {
  Context ctx(MPI_COMM_WORLD, test_options(5.0));
  const int W = ctx.world_size(), r = ctx.rank();
  int call = 300;
  bool trans = false;
  for (const PathsMode& mode : kPathsModes)
    for (auto [in, out] : kPairs) {
      const Problem p{in, out, mode.n, 12, trans};
      trans = !trans;
      const int64_t rows = mode.rows, m = rows * W;
      const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(in);
      const std::size_t blk = static_cast<std::size_t>(rows) * in_row;
      const std::size_t out_bytes = static_cast<std::size_t>(m * p.n) * dtype_size(out);
      const std::string tag = describe(p) + " m=" + std::to_string(m) + " " + mode.name + " mode";
      A2aGemm op(ctx, options_for(p, m));
      Data a = make_data(p, rows, call++);
      Data b = make_data(p, rows, call++);  // other values in every block, the own one too
      Bytes fwd_out;
      check_forward(op, p, rows, a, true, true, tag + " forward (data A)", &fwd_out);
      // What gemm-only must multiply: A's exchange, with block r replaced by B's own block.
      Bytes mixed = mpi_alltoall(a.input, rows, in_row);
      std::memcpy(mixed.data() + blk * r, b.input.data() + blk * r, blk);
      Reference ref = reference(p, m, mixed, a.weight, &a.bias);
      for (int rep = 0; rep < 2; ++rep) {
        const std::string what = tag + " gemm-only (own block of B) rep " + std::to_string(rep);
        Bytes got(out_bytes + 8, kPoison);
        expect_no_throw(
            [&] {
              op.forward_gemm_only(b.input.data(), m, a.weight.data(), a.bias.data(), got.data());
            },
            what + " forward_gemm_only");
        expect_close(ref, got, out, m, p.n, what);
        expect_untouched(got, out_bytes, what);
        // The other blocks: forward(A)'s output bit for bit (block r blanked in both).
        if (fwd_out.size() >= out_bytes) {
          const std::size_t out_blk = out_bytes / static_cast<std::size_t>(W);
          Bytes want(fwd_out.begin(), fwd_out.begin() + static_cast<std::ptrdiff_t>(out_bytes));
          Bytes others(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(out_bytes));
          std::fill_n(want.begin() + static_cast<std::ptrdiff_t>(out_blk * r), out_blk, 0);
          std::fill_n(others.begin() + static_cast<std::ptrdiff_t>(out_blk * r), out_blk, 0);
          expect_same_bits(want, others, out, p.n, what + " other blocks vs forward(A)");
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);  // gemm-only does not synchronise; the next forward does
      // And a normal forward afterwards exchanges B in full.
      check_forward(op, p, rows, b, false, true, tag + " forward (data B) after gemm-only");
      if (any_rank(HasFailure())) return;  // uniform
    }
}

// comm-only(C) then gemm-only(C) gives forward(C)'s output, with a2a_output given to comm-only
// or not (the rows gemm-only reads are refreshed either way); the op ran a forward with other
// data before, so stale rows show up.
TEST_F(A2aGemmPaths, CommOnlyThenGemmOnlyEqualsForward) {
  Context ctx(MPI_COMM_WORLD, test_options(5.0));
  const int W = ctx.world_size(), r = ctx.rank();
  int call = 400;
  bool trans = true;
  for (const PathsMode& mode : kPathsModes)
    for (auto [in, out] : kPairs) {
      trans = !trans;  // both weight layouts in each mode, with and without a2a_output
      for (bool with_a2a : {true, false}) {
        const Problem p{in, out, mode.n, 12, trans};
        const int64_t rows = mode.rows, m = rows * W;
        const std::size_t in_row = static_cast<std::size_t>(p.k) * dtype_size(in);
        const std::size_t out_bytes = static_cast<std::size_t>(m * p.n) * dtype_size(out);
        const std::string tag = describe(p) + " m=" + std::to_string(m) + " " + mode.name +
                                " mode" + (with_a2a ? " comm-only a2a_output" : " comm-only null");
        A2aGemm op(ctx, options_for(p, m));
        Data a = make_data(p, rows, call++), c = make_data(p, rows, call++);
        check_forward(op, p, rows, a, true, true, tag + " forward (data A)");
        Bytes a2a_ref = mpi_alltoall(c.input, rows, in_row);
        Bytes a2a(a2a_ref.size(), kA2aPoison);
        expect_no_throw(
            [&] { op.forward_comm_only(c.input.data(), m, with_a2a ? a2a.data() : nullptr); },
            tag + " forward_comm_only");
        if (with_a2a)
          expect_same_a2a(a2a_ref, a2a, rows, in_row, tag + " comm-only (data C)");
        else if (a2a != Bytes(a2a.size(), kA2aPoison))
          ADD_FAILURE() << tag << ": rank " << r << ": a2a_output written though not passed";
        Bytes got(out_bytes + 8, kPoison);
        expect_no_throw(
            [&] {
              op.forward_gemm_only(c.input.data(), m, c.weight.data(), c.bias.data(), got.data());
            },
            tag + " forward_gemm_only");
        expect_untouched(got, out_bytes, tag + " gemm-only");
        Reference ref = reference(p, m, a2a_ref, c.weight, &c.bias);
        expect_close(ref, got, out, m, p.n, tag + " comm-only + gemm-only (data C)");
        MPI_Barrier(MPI_COMM_WORLD);  // gemm-only does not synchronise; the next forward does
        Bytes want;
        if (check_forward(op, p, rows, c, true, true, tag + " forward (data C)", &want)) {
          got.resize(out_bytes);
          want.resize(out_bytes);
          expect_same_bits(want, got, out, p.n, tag + " comm-only + gemm-only vs forward(C)");
        }
        if (any_rank(HasFailure())) return;  // uniform
      }
    }
}

// ---- 4. bad inputs ----------------------------------------------------------------------------

class A2aGemmBadInput : public MpiTest {};

TEST_F(A2aGemmBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 4;
  const Problem p{DType::kFloat32, DType::kFloat32, 24, 16, false};
  A2aGemm op(ctx, options_for(p, rows * W));
  Data d = make_data(p, rows + 2, 0);  // room for more rows than max_m
  Bytes out(static_cast<std::size_t>((rows + 2) * W * p.n) * 4),
      a2a(static_cast<std::size_t>((rows + 2) * W * p.k) * 4);
  const void* in = d.input.data();
  const void* w = d.weight.data();
  const void* b = d.bias.data();
  void* o = out.data();
  void* a = a2a.data();
  int call = 1;
  auto good_call = [&](const std::string& after) {
    Data good = make_data(p, call % 2 ? rows : 1, call);
    check_forward(op, p, call % 2 ? rows : 1, good, true, true, "good forward after " + after);
    ++call;
  };
  const std::string op_name = "a2a_gemm";
  if (W > 1) {
    expect_error([&] { op.forward(in, W + 1, w, b, o, a); }, Errc::kInvalidArgument,
                 {op_name, "m="}, "m % W != 0");
    good_call("m % W != 0");
    expect_error([&] { op.forward(in, r == W - 1 ? 2 * W : W, w, b, o, a); },
                 Errc::kInvalidArgument, {op_name}, "ranks pass different m");
    good_call("different m");
    expect_error([&] { op.forward(in, r == 0 ? 0 : W, w, b, o, a); }, Errc::kInvalidArgument,
                 {op_name}, "ranks pass different m (0 on rank 0)");
    good_call("different m, 0 on rank 0");
    expect_error([&] { op.forward_comm_only(in, r == 0 ? 0 : W, a); }, Errc::kInvalidArgument,
                 {op_name}, "comm-only: ranks pass different m (0 on rank 0)");
    good_call("comm-only different m");
  }
  expect_error([&] { op.forward(in, (rows + 1) * W, w, b, o, a); }, Errc::kInvalidArgument,
               {op_name, "max_m"}, "m > max_m");
  good_call("m > max_m");
  expect_error([&] { op.forward(in, -W, w, b, o, a); }, Errc::kInvalidArgument, {op_name}, "m < 0");
  good_call("m < 0");
  expect_error([&] { op.forward(in, W, r == 0 ? nullptr : w, b, o, a); }, Errc::kInvalidArgument,
               {op_name, "weight"}, "NULL weight on rank 0");
  good_call("NULL weight");
  expect_error([&] { op.forward(in, W, nullptr, b, o, a); }, Errc::kInvalidArgument,
               {op_name, "weight"}, "NULL weight everywhere");
  good_call("NULL weight everywhere");
  expect_error([&] { op.forward(r == W - 1 ? nullptr : in, W, w, b, o, a); },
               Errc::kInvalidArgument, {op_name, "input"}, "NULL input on the last rank");
  good_call("NULL input");
  expect_error([&] { op.forward(in, W, w, b, r == 0 ? nullptr : o, a); }, Errc::kInvalidArgument,
               {op_name, "output"}, "NULL output on rank 0");
  good_call("NULL output");
  expect_error([&] { op.forward_comm_only(r == W - 1 ? nullptr : in, W, a); },
               Errc::kInvalidArgument, {op_name, "input"},
               "comm-only: NULL input on the last rank");
  good_call("comm-only NULL input");
  // gemm-only is local: every rank that passes a bad argument raises, with no communication.
  expect_error([&] { op.forward_gemm_only(in, (rows + 1) * W, w, b, o); }, Errc::kInvalidArgument,
               {op_name, "max_m"}, "gemm-only: m > max_m");
  expect_error([&] { op.forward_gemm_only(in, W, nullptr, b, o); }, Errc::kInvalidArgument,
               {op_name, "weight"}, "gemm-only: NULL weight");
  if (W > 1)
    expect_error([&] { op.forward_gemm_only(in, W + 1, w, b, o); }, Errc::kInvalidArgument,
                 {op_name, "m="}, "gemm-only: m % W != 0");
  good_call("gemm-only errors");
  // m == 0 with null pointers is a no-op, on every path.
  expect_no_throw(
      [&] {
        op.forward(nullptr, 0, nullptr, nullptr, nullptr, nullptr);
        op.forward_comm_only(nullptr, 0, nullptr);
        op.forward_gemm_only(nullptr, 0, nullptr, nullptr, nullptr);
      },
      "m == 0");
  good_call("m == 0");
  good_call("a good forward");
}

TEST_F(A2aGemmBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const Problem base{DType::kFloat32, DType::kFloat32, 24, 16, false};
  const std::string op_name = "a2a_gemm";
  auto create = [&](A2aGemmOptions o) { A2aGemm op(ctx, o); };
  const A2aGemmOptions good = options_for(base, 4 * W);
  for (auto [in, out] :
       {std::pair{DType::kBFloat16, DType::kFloat64}, std::pair{DType::kFloat32, DType::kBFloat16},
        std::pair{DType::kFloat64, DType::kFloat32}, std::pair{DType::kFloat32, DType::kFloat64},
        std::pair{DType::kFloat64, DType::kBFloat16}}) {
    A2aGemmOptions o = good;
    o.input_dtype = in;
    o.output_dtype = out;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name},
                 std::string("pair ") + dtype_name(in) + " -> " + dtype_name(out));
  }
  A2aGemmOptions o = good;
  if (r == 0) o.output_dtype = DType::kBFloat16;  // invalid pair on rank 0 only
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name},
               "invalid pair on rank 0 only");
  o = good;
  o.input_dtype = static_cast<DType>(9);
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "invalid input dtype");
  o = good;
  o.n = 0;
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "n = 0");
  o = good;
  if (r == W - 1) o.k = 0;
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "k = 0 on rank W-1");
  o = good;
  o.max_m = -1;
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "max_m = -1");
  if (W > 1) {
    o = good;
    if (r == W - 1) o.k = 17;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "k differs");
    o = good;
    if (r == 0) o.n = 25;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "n differs");
    o = good;
    if (r == W - 1) o.transpose_weight = true;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "transpose_weight differs");
    o = good;
    if (r == 0) o.max_m = 8 * W;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "max_m differs");
    o = good;
    if (r == W - 1) {
      o.input_dtype = DType::kFloat64;
      o.output_dtype = DType::kFloat64;
    }
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name}, "dtypes differ");
  }
  // A good op on the same context still works.
  if (!any_rank(HasFailure())) {
    A2aGemm op(ctx, good);
    Data d = make_data(base, 4, 3);
    check_forward(op, base, 4, d, true, true, "good op after create errors");
  }
}

TEST_F(A2aGemmBadInput, ClosedContext) {
  Context ctx(MPI_COMM_WORLD, test_options());
  ctx.close();
  const Problem p{DType::kFloat32, DType::kFloat32, 8, 8, false};
  expect_error([&] { A2aGemm op(ctx, options_for(p, 4 * world_size())); }, Errc::kInvalidUsage,
               {"a2a_gemm", "closed"}, "create on a closed context");
}

// ---- 5. several compute workers ---------------------------------------------------------------

class A2aGemmWorkers : public MpiTest {};

// GEMMs split over several compute workers: every column and every block must be computed,
// whatever n % workers is.
TEST_F(A2aGemmWorkers, EveryColumnComputed) {
  for (int threads : {2, 3}) {
    Context ctx(MPI_COMM_WORLD, threaded_options(threads));
    for (int64_t n : {129, 193})
      for (bool trans : {false, true}) {
        const Problem p{DType::kFloat32, DType::kFloat32, n, 8, trans};
        const int64_t rows = 3;
        A2aGemm op(ctx, options_for(p, rows * ctx.world_size()));
        Data d = make_data(p, rows, static_cast<int>(n) + threads);
        check_forward(op, p, rows, d, true, true,
                      "threads=" + std::to_string(threads) + " " + describe(p));
      }
  }
}

// ---- 6. lifetime -------------------------------------------------------------------------------

class A2aGemmLifetime : public MpiTest {};

// A moved op works; once the ops (and the context) are gone, no fluxcpp segment this process
// created is left in /dev/shm.
TEST_F(A2aGemmLifetime, MoveAndNoShmLeft) {
  const int W = world_size();
  {
    Context ctx(MPI_COMM_WORLD, test_options());
    const Problem p{DType::kBFloat16, DType::kBFloat16, 20, 30, true};
    A2aGemm a(ctx, options_for(p, 4 * W));
    check_forward(a, p, 4, make_data(p, 4, 1), true, true, "before move");
    A2aGemm b(std::move(a));
    check_forward(b, p, 3, make_data(p, 3, 2), true, false, "moved-to op");
    A2aGemm c(ctx, options_for({DType::kFloat32, DType::kFloat32, 5, 5, false}, W));
    c = std::move(b);  // c's own op is released here
    check_forward(c, p, 2, make_data(p, 2, 3), false, true, "move-assigned op");
  }
  expect_no_segments_left();
}

}  // namespace
}  // namespace fluxcpp::test
