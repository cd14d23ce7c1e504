// A2aTransposeGemm (Ulysses, after attention) against the unfused reference of
// tests/support/ulysses_reference.hpp: every dtype pair and shape with a2a_output on and off,
// many consecutive calls, and the benchmark paths (comm-only, gemm-only).
#include <algorithm>
#include <string>
#include <utility>

#include "fluxcpp/fluxcpp.hpp"
#include "ulysses_reference.hpp"

namespace fluxcpp::test {
namespace {

// ---- correctness over dtype pairs and shapes, bias and a2a_output on and off ----------------

TEST_P(UlyssesShapes, A2aTransposeGemmMatchesAlltoallThenGemm) {
  const UlyssesCase c = GetParam();
  const UlyssesShape& s = c.shape;
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

// ---- many consecutive calls -----------------------------------------------------------------

// 200 forwards on one op reusing the same buffers with new contents every call: input, weight
// and bias all change, bs and seq change (including bs == 0), bias and a2a_output come and go.
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
    expect_no_throw(
        [&] {
          op.forward(g.input.data(), bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
                     out.data(), with_a2a ? a2a.data() : nullptr);
        },
        what + " forward");
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
      expect_a2a_untouched(a2a, a2a_bytes, what);
    }
    if (any_rank(HasFailure())) break;
  }
}

// ---- benchmark paths: comm-only and gemm-only -----------------------------------------------

// forward_comm_only fills a2a_output exactly as forward does; forward_gemm_only over it gives
// forward's output bit for bit. Then once more with a2a_output null; a normal forward after.
TEST_P(UlyssesPaths, A2aTransposeGemmCommOnlyThenGemmOnly) {
  const auto [in, out] = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
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
    expect_no_throw(
        [&] { op.forward_comm_only(g.input.data(), bs, seq, comm_a2a ? a2a.data() : nullptr); },
        tag + " forward_comm_only");
    if (comm_a2a && !fused_a2a.empty())
      expect_same_a2a(fused_a2a, a2a, in, d, tag + " comm-only a2a_output vs forward's");
    expect_a2a_untouched(a2a, comm_a2a ? a2a_bytes : 0, tag + " comm-only");
    Bytes split = poisoned_output(out, count);
    expect_no_throw(
        [&] {
          op.forward_gemm_only(bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
                               split.data());
        },
        tag + " forward_gemm_only");
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

}  // namespace
}  // namespace fluxcpp::test
