// GemmA2aTranspose and A2aTransposeGemm (Ulysses sequence parallelism) together, against the
// unfused references of tests/support/ulysses_reference.hpp: shapes below the create-time maxima
// and bs == 0, the two ops as one attention block, and no shared-memory segment left behind.
// The binary (fluxcpp_ulysses_test) also holds ulysses_gemm_a2a_transpose_test.cpp,
// ulysses_a2a_transpose_gemm_test.cpp and ulysses_bad_input_test.cpp; the suites whose tests
// span those files are instantiated here.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "ulysses_reference.hpp"

namespace fluxcpp::test {
namespace {

// ---- suites spread over several files ---------------------------------------------------------

// UlyssesShapes: every dtype pair with every shape (kUlyssesShapes), each op.
INSTANTIATE_TEST_SUITE_P(Cases, UlyssesShapes, ::testing::ValuesIn(all_ulysses_cases()),
                         [](const ::testing::TestParamInfo<UlyssesCase>& i) {
                           return case_name(i.param);
                         });

// UlyssesPaths: the benchmark paths of each op, per dtype pair.
INSTANTIATE_TEST_SUITE_P(Pairs, UlyssesPaths, ::testing::ValuesIn(kPairs), pair_test_name);

// ---- shapes below the create-time maxima; bs == 0 --------------------------------------

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

INSTANTIATE_TEST_SUITE_P(Pairs, UlyssesMaxima, ::testing::ValuesIn(kPairs), pair_test_name);

class UlyssesNoop : public MpiTest {};

// bs == 0 writes nothing, with real buffers or with null pointers, and the op works afterwards.
TEST_F(UlyssesNoop, BsZeroIsANoOp) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  GemmA2aTranspose gat(ctx, gat_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, 8, W, 4));
  A2aTransposeGemm atg(ctx, atg_options(DType::kFloat32, DType::kFloat32, 2, 4 * W, W, 4, 6));
  for (int64_t seq : {int64_t{W}, int64_t{4 * W}}) {
    const std::string tag = "bs=0 seq=" + std::to_string(seq);
    {
      const Dims d = dims_of(gat.options(), 0, seq);
      GatData g = gat_data(gat.options(), d, 1);
      check_gat_forward(gat, 0, seq, g, true, std::string(kGat) + " " + tag);
      expect_no_throw([&] { gat.forward(nullptr, 0, seq, nullptr, nullptr, nullptr); },
                      std::string(kGat) + " " + tag + " null pointers");
    }
    {
      const Dims d = dims_of(atg.options(), 0, seq);
      AtgData g = atg_data(atg.options(), d, 1);
      check_atg_forward(atg, 0, seq, g, true, true, std::string(kAtg) + " " + tag);
      expect_no_throw([&] { atg.forward(nullptr, 0, seq, nullptr, nullptr, nullptr, nullptr); },
                      std::string(kAtg) + " " + tag + " null pointers");
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

// ---- a Ulysses attention block with identity attention ----------------------------------

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
  const Bytes one = narrow({1.0}, mid);
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

INSTANTIATE_TEST_SUITE_P(Pairs, UlyssesRoundTrip, ::testing::ValuesIn(kPairs), pair_test_name);

// ---- no shared-memory segment outlives its op ---------------------------------------------

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
