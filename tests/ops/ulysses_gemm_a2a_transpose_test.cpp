// GemmA2aTranspose (Ulysses, before attention) against the unfused reference of
// tests/support/ulysses_reference.hpp: every dtype pair and shape, many consecutive calls, and the
// benchmark paths (gemm-only, comm-only) with the orders a caller may call them in.
#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "ulysses_reference.hpp"

namespace fluxcpp::test {
namespace {

// ---- correctness over dtype pairs and shapes, bias on and off -------------------------------

// The op created with exactly the shape's maxima; with and without bias, fresh data each call.
TEST_P(UlyssesShapes, GemmA2aTransposeMatchesGemmThenAlltoall) {
  const UlyssesCase c = GetParam();
  const UlyssesShape& s = c.shape;
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

// ---- many consecutive calls -----------------------------------------------------------------

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
    expect_no_throw(
        [&] {
          op.forward(g.input.data(), bs, seq, g.weight.data(), with_bias ? g.bias.data() : nullptr,
                     out.data());
        },
        what + " forward");
    if (!HasFailure()) {
      const std::size_t count = gat_out_count(d);
      expect_close_at(ref, out, o.output_dtype, count, what, gat_where(d));
      expect_untouched(out, count * 4, what);
    }
    if (any_rank(HasFailure())) break;
  }
}

// ---- benchmark paths: gemm-only and comm-only -----------------------------------------------

// forward_gemm_only then forward_comm_only gives forward's output, bit for bit (same GEMM blocks,
// same transpose), twice with different data; a normal forward afterwards is still correct.
TEST_P(UlyssesPaths, GemmA2aTransposeGemmOnlyThenCommOnly) {
  const auto [in, out] = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
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
    expect_no_throw(
        [&] {
          op.forward_gemm_only(g.input.data(), bs, seq, g.weight.data(),
                               with_bias ? g.bias.data() : nullptr);
        },
        tag + " forward_gemm_only");
    MPI_Barrier(MPI_COMM_WORLD);  // gemm-only is local
    Bytes split = poisoned_output(out, count);
    expect_no_throw([&] { op.forward_comm_only(bs, seq, split.data()); },
                    tag + " forward_comm_only");
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

// gemm-only (data B) and then comm-only, which must bring B's blocks: the split output is checked
// against B's reference (computed by the caller beforehand: it is collective) and must not be
// written beyond this rank's block.
void check_gemm_only_then_comm_only(GemmA2aTranspose& op, int64_t bs, int64_t seq, const GatData& b,
                                    const Reference& ref_b, const std::string& tag) {
  const GemmA2aTransposeOptions& o = op.options();
  const Dims d = dims_of(o, bs, seq);
  const std::size_t count = gat_out_count(d);
  expect_no_throw(
      [&] { op.forward_gemm_only(b.input.data(), bs, seq, b.weight.data(), b.bias.data()); },
      tag + " forward_gemm_only");
  MPI_Barrier(MPI_COMM_WORLD);  // gemm-only is local
  Bytes split = poisoned_output(o.output_dtype, count);
  expect_no_throw([&] { op.forward_comm_only(bs, seq, split.data()); }, tag + " forward_comm_only");
  expect_untouched(split, count * dtype_size(o.output_dtype), tag + " comm-only");
  expect_close_at(ref_b, split, o.output_dtype, count, tag + " gemm-only (data B) + comm-only",
                  gat_where(d));
}

class UlyssesPathsOrder : public MpiTest {};

// forward_gemm_only is local and may be called as soon as forward returned on this rank, with
// other data: it must not disturb peers that are still transposing this rank's blocks of that
// forward in. Then comm-only transposes the gemm-only blocks. 50 rounds, no barrier between
// forward and gemm-only.
TEST_F(UlyssesPathsOrder, GemmA2aTransposeGemmOnlyRightAfterForward) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
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
    Bytes out_a = poisoned_output(o.output_dtype, count);
    // The forward returns; gemm-only follows at once, peers may still be reading.
    expect_no_throw(
        [&] { op.forward(a.input.data(), bs, seq, a.weight.data(), a.bias.data(), out_a.data()); },
        tag + " forward (data A)");
    check_gemm_only_then_comm_only(op, bs, seq, b, ref_b, tag);
    expect_close_at(ref_a, out_a, o.output_dtype, count, tag + " forward (data A)", gat_where(d));
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
    const auto in_between = [&] { between.call(scratch, scratch_out.data()); };
    if (between.rejected)
      expect_error(in_between, Errc::kInvalidArgument, {kGat}, tag);
    else
      expect_no_throw(in_between, tag);
    expect_untouched(scratch_out, 0, tag + " (in-between call)");
    check_gemm_only_then_comm_only(op, bs, seq, b, ref_b, tag);
    if (any_rank(HasFailure())) return;  // uniform
  }
  check_gat_forward(op, bs, seq, gat_data(o, d, call), true,
                    gat_name(o, d) + " forward after the in-between calls");
}

}  // namespace
}  // namespace fluxcpp::test
