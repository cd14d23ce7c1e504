// GemmA2aTranspose and A2aTransposeGemm given bad arguments: forward and create errors reach
// every rank as kInvalidArgument naming the op and the argument, and the ops (or good ones on the
// same context) work afterwards. References: tests/support/ulysses_reference.hpp.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "ulysses_reference.hpp"

namespace fluxcpp::test {
namespace {

// ---- bad inputs ----------------------------------------------------------------------------

// Creating an Op from options `good` changed by `change` fails on every rank (expect_invalid).
template <typename Op, typename Options, typename Change>
void invalid_create(const Context& ctx, const char* op, Options good, Change&& change,
                    std::vector<std::string> needles, const std::string& what) {
  change(good);
  expect_invalid(
      op, [&] { Op created(ctx, good); }, std::move(needles), "create: " + what);
}

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
  const auto invalid = [&](const std::function<void()>& fn, std::vector<std::string> needles,
                           const std::string& what) {
    expect_invalid(kGat, fn, std::move(needles), what);
  };
  if (W > 1) {
    invalid([&] { op.forward(in, 1, W + 1, w, b, o); }, {"seq"}, "seq % W != 0");
    invalid([&] { op.forward(in, 1, r == W - 1 ? 2 * W : W, w, b, o); }, {"seq"},
            "ranks pass different seq");
    invalid([&] { op.forward(in, r == 0 ? 2 : 1, W, w, b, o); }, {"bs"}, "ranks pass different bs");
  }
  invalid([&] { op.forward(in, 1, max_seq + W, w, b, o); }, {"seq"}, "seq > max_seq");
  invalid([&] { op.forward(in, max_bs + 1, W, w, b, o); }, {"bs"}, "bs > max_bs");
  invalid([&] { op.forward(in, -1, W, w, b, o); }, {"bs"}, "bs < 0");
  invalid([&] { op.forward(in, 1, W, r == 0 ? nullptr : w, b, o); }, {"weight"},
          "NULL weight on rank 0");
  invalid([&] { op.forward(in, 1, W, nullptr, b, o); }, {"weight"}, "NULL weight everywhere");
  invalid([&] { op.forward(r == W - 1 ? nullptr : in, 1, W, w, b, o); }, {"input"},
          "NULL input on the last rank");
  invalid([&] { op.forward(in, 1, W, w, b, r == 0 ? nullptr : o); }, {"output"},
          "NULL output on rank 0");
  // comm-only is collective too.
  invalid([&] { op.forward_comm_only(1, max_seq + W, o); }, {"seq"}, "comm-only seq > max_seq");
  // gemm-only is local: an error on every rank when every rank passes the bad value.
  invalid([&] { op.forward_gemm_only(in, max_bs + 1, W, w, b); }, {"bs"}, "gemm-only bs > max_bs");
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
  const auto invalid = [&](const std::function<void()>& fn, std::vector<std::string> needles,
                           const std::string& what) {
    expect_invalid(kAtg, fn, std::move(needles), what);
  };
  if (W > 1) {
    invalid([&] { op.forward(in, 1, W + 1, w, b, o, a); }, {"seq"}, "seq % W != 0");
    invalid([&] { op.forward(in, 1, r == W - 1 ? 2 * W : W, w, b, o, a); }, {"seq"},
            "ranks pass different seq");
    invalid([&] { op.forward(in, r == 0 ? 2 : 1, W, w, b, o, a); }, {"bs"},
            "ranks pass different bs");
  }
  invalid([&] { op.forward(in, 1, max_seq + W, w, b, o, a); }, {"seq"}, "seq > max_seq");
  invalid([&] { op.forward(in, max_bs + 1, W, w, b, o, a); }, {"bs"}, "bs > max_bs");
  invalid([&] { op.forward(in, -1, W, w, b, o, a); }, {"bs"}, "bs < 0");
  invalid([&] { op.forward(in, 1, W, r == 0 ? nullptr : w, b, o, a); }, {"weight"},
          "NULL weight on rank 0");
  invalid([&] { op.forward(in, 1, W, nullptr, b, o); }, {"weight"}, "NULL weight everywhere");
  invalid([&] { op.forward(r == W - 1 ? nullptr : in, 1, W, w, b, o, a); }, {"input"},
          "NULL input on the last rank");
  invalid([&] { op.forward(in, 1, W, w, b, r == 0 ? nullptr : o, a); }, {"output"},
          "NULL output on rank 0");
  invalid([&] { op.forward_comm_only(in, 1, max_seq + W, a); }, {"seq"}, "comm-only seq > max_seq");
  invalid([&] { op.forward_gemm_only(max_bs + 1, W, w, b, o); }, {"bs"}, "gemm-only bs > max_bs");
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
  const auto gat_invalid = [&](auto&& change, std::vector<std::string> needles,
                               const std::string& what) {
    invalid_create<GemmA2aTranspose>(ctx, kGat, gat_good, change, std::move(needles), what);
  };
  const auto atg_invalid = [&](auto&& change, std::vector<std::string> needles,
                               const std::string& what) {
    invalid_create<A2aTransposeGemm>(ctx, kAtg, atg_good, change, std::move(needles), what);
  };
  if (W > 1) {
    const auto indivisible_heads = [&](auto& o) { o.nheads = W + 1; };
    gat_invalid(indivisible_heads, {"nheads"}, "nheads % W != 0");
    atg_invalid(indivisible_heads, {"nheads"}, "nheads % W != 0");
    // Options that differ between ranks.
    gat_invalid([&](auto& o) { o.hidden = r == W - 1 ? 9 : o.hidden; }, {"hidden"},
                "hidden differs on the last rank");
    gat_invalid([&](auto& o) { o.nheads = r == 0 ? 4 * W : o.nheads; }, {"nheads"},
                "nheads differs on rank 0");
    atg_invalid([&](auto& o) { o.n = r == W - 1 ? 7 : o.n; }, {}, "n differs on the last rank");
    atg_invalid([&](auto& o) { o.head_dim = r == 0 ? 5 : o.head_dim; }, {"head_dim"},
                "head_dim differs on rank 0");
  }
  gat_invalid([](auto& o) { o.head_dim = 0; }, {"head_dim"}, "head_dim = 0");
  gat_invalid([](auto& o) { o.hidden = 0; }, {}, "hidden = 0");
  atg_invalid([](auto& o) { o.head_dim = 0; }, {"head_dim"}, "head_dim = 0");
  atg_invalid([](auto& o) { o.n = 0; }, {}, "n = 0");
  const std::pair<DType, DType> bad_pairs[] = {{DType::kBFloat16, DType::kFloat64},
                                               {DType::kFloat32, DType::kBFloat16},
                                               {DType::kFloat64, DType::kFloat32},
                                               {DType::kFloat32, DType::kFloat64}};
  for (const std::pair<DType, DType>& dtypes : bad_pairs) {
    const std::string pair =
        std::string("pair ") + dtype_name(dtypes.first) + " -> " + dtype_name(dtypes.second);
    const auto set_pair = [&](auto& o) {
      o.input_dtype = dtypes.first;
      o.output_dtype = dtypes.second;
    };
    gat_invalid(set_pair, {}, pair);
    atg_invalid(set_pair, {}, pair);
  }
  const auto rank0_pair = [&](auto& o) {  // invalid pair on rank 0 only
    if (r == 0) o.output_dtype = DType::kBFloat16;
  };
  gat_invalid(rank0_pair, {}, "invalid pair on rank 0 only");
  atg_invalid(rank0_pair, {}, "invalid pair on rank 0 only");
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

}  // namespace
}  // namespace fluxcpp::test
