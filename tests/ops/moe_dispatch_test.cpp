// MoeDispatch against the unfused reference (MPI_Alltoall of the counts, MPI_Alltoallv of the rows
// and their (t, k, w), loops that put them in (local expert, source, token, k) order), bit for bit:
// the op only copies, so any payload comes through unchanged. E ∈ {W, 4W, 64} (64 skipped where
// W does not divide it), topk ∈ {1, 2, 6}, uniform and skewed routing, a rank without tokens, -1
// slots and duplicate experts in every table; bad input on any rank fails every rank.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "moe_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// One forward against the reference; `which` selects optional outputs (bit 0 weights, bit 1 src).
// Returns false on a mismatch (already reported).
bool check_call(MoeDispatch& op, const Routing& rt, DType dtype, int64_t hidden, int call,
                int which, const std::string& what) {
  const MoeDispatchOptions& o = op.options();
  const int64_t L = o.num_experts / world_size(), cap = o.max_recv_rows;
  const std::size_t row = static_cast<std::size_t>(hidden) * dtype_size(dtype);
  const Bytes input =
      random_tensor(dtype, static_cast<std::size_t>(rt.T * hidden), seed_of(world_rank(), call, 3));
  const DispatchRef ref = reference_dispatch(input, row, rt, o.num_experts, o.topk);
  Bytes recv(static_cast<std::size_t>(cap) * row + 64, kPoison);
  std::vector<float> weights(static_cast<std::size_t>(cap) + 1, -3.0f);
  std::vector<int32_t> src(static_cast<std::size_t>(cap) * 3 + 3, -9);
  std::vector<int64_t> counts(static_cast<std::size_t>(L), -7);
  int64_t rows = -1;
  const bool ww = (which & 1) != 0, ws = (which & 2) != 0;
  const int64_t got = op.forward({input.data(), rt.T, rt.ids.data(), rt.weights.data()},
                                 {recv.data(), ww ? weights.data() : nullptr,
                                  ws ? src.data() : nullptr, counts.data(), &rows});
  bool ok = true;
  auto fail = [&](const std::string& m) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": " << m;
    ok = false;
  };
  if (got != ref.rows || rows != ref.rows)
    fail("R = " + std::to_string(got) + " / " + std::to_string(rows) + ", expected " +
         std::to_string(ref.rows));
  if (counts != ref.expert_counts) fail("recv_expert_counts differ");
  for (int64_t i = 0; i < ref.rows && ok; ++i)
    if (std::memcmp(recv.data() + i * row, ref.recv.data() + i * row, row) != 0) {
      fail("row " + std::to_string(i) + " of " + std::to_string(ref.rows) + " differs (src " +
           std::to_string(ref.src[3 * i]) + "," + std::to_string(ref.src[3 * i + 1]) + "," +
           std::to_string(ref.src[3 * i + 2]) + ")");
      break;
    }
  if (!std::all_of(recv.begin() + ref.rows * row, recv.end(),
                   [](unsigned char b) { return b == kPoison; }))
    fail("rows >= R were written");
  if (ww) {
    if (std::memcmp(weights.data(), ref.weights.data(), 4 * ref.rows) != 0)
      fail("recv_weights differ");
    if (!std::all_of(weights.begin() + ref.rows, weights.end(), [](float w) { return w == -3.0f; }))
      fail("recv_weights >= R were written");
  }
  if (ws) {
    if (!std::equal(ref.src.begin(), ref.src.end(), src.begin())) fail("recv_src differs");
    if (!std::all_of(src.begin() + 3 * ref.rows, src.end(), [](int32_t v) { return v == -9; }))
      fail("recv_src >= R was written");
  }
  return !any_rank(!ok);  // the same on every rank, so callers stop together
}

struct Case {
  int e_mode;  // E = W, 4W, 64
  int64_t topk;
  Route route;
  DType dtype;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << "E" << c.e_mode << "_k" << c.topk << "_" << route_name(c.route) << "_"
            << dtype_name(c.dtype);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int m = 0; m < 3; ++m)
    for (int64_t k : {1, 2, 6})
      for (Route p : {Route::kUniform, Route::kSkewed, Route::kZeroRank})
        v.push_back({m, k, p, DType::kFloat32});
  v.push_back({1, 2, Route::kUniform, DType::kBFloat16});
  v.push_back({1, 6, Route::kSkewed, DType::kFloat64});
  return v;
}

class MoeDispatchTest : public MoeCaseTest<Case> {};

TEST_P(MoeDispatchTest, MatchesMpiAlltoallv) {
  const Case c = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t hidden = 36, max_tokens = 40;
  MoeDispatch op(ctx, {max_tokens, hidden, c.topk, E_, 0, c.dtype});
  for (int call = 0; call < 4; ++call) {
    const Routing rt =
        make_routing(c.route, world_rank(), world_size(), E_, c.topk, max_tokens, call);
    if (!check_call(op, rt, c.dtype, hidden, call, call % 4, "call " + std::to_string(call))) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeDispatchTest, ::testing::ValuesIn(cases()), [](const auto& i) {
  std::ostringstream s;
  s << i.param;
  return s.str();
});

// Rows of 16 KiB, a few MiB per rank: blocks span many publish steps and transport chunks.
class MoeDispatchLarge : public MpiTest {};
TEST_F(MoeDispatchLarge, LargeRows) {
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options(60.0));
  const int64_t hidden = 4096, max_tokens = 160, E = 4 * W;
  MoeDispatch op(ctx, {max_tokens, hidden, 2, E, 0, DType::kFloat32});
  for (int call = 0; call < 2; ++call) {
    const Routing rt = make_routing(call == 0 ? Route::kUniform : Route::kSkewed, world_rank(), W,
                                    E, 2, max_tokens, call);
    check_call(op, rt, DType::kFloat32, hidden, call, 3, "large call " + std::to_string(call));
  }
}

// 200 calls with changing routing, token counts and optional outputs on one op.
class MoeDispatchCalls : public MpiTest {};
TEST_F(MoeDispatchCalls, TwoHundredCallsWithChangingRouting) {
  const int W = world_size();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t hidden = 12, max_tokens = 24, E = 4 * W, K = 2;
  MoeDispatch op(ctx, {max_tokens, hidden, K, E, 0, DType::kBFloat16});
  const Route routes[3] = {Route::kUniform, Route::kSkewed, Route::kZeroRank};
  for (int call = 0; call < 200; ++call) {
    const Routing rt = make_routing(routes[call % 3], world_rank(), W, E, K, max_tokens, call);
    if (!check_call(op, rt, DType::kBFloat16, hidden, call, call % 4,
                    "call " + std::to_string(call)))
      break;
  }
}

// Bad input on one rank: kInvalidArgument on every rank, naming op, argument and values; the op
// works afterwards.
class MoeDispatchBadInput : public MpiTest {};
TEST_F(MoeDispatchBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  const int W = world_size(), r = world_rank(), last = W - 1;
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t hidden = 8, max_tokens = 16, K = 2, E = 2 * W;
  MoeDispatch op(ctx, {max_tokens, hidden, K, E, 0, DType::kFloat32});
  const int64_t cap = op.options().max_recv_rows;
  Bytes input(static_cast<std::size_t>(max_tokens * hidden) * 4, 1);
  Bytes recv(static_cast<std::size_t>(cap * hidden) * 4, kPoison);
  std::vector<int64_t> counts(static_cast<std::size_t>(E / W));
  std::vector<float> w(static_cast<std::size_t>(cap));
  int call = 0;
  auto good = [&] {
    const Routing rt = make_routing(Route::kUniform, r, W, E, K, max_tokens, 1000 + call);
    check_call(op, rt, DType::kFloat32, hidden, 1000 + call++, 3, "good call after an error");
  };
  Routing rt = make_routing(Route::kUniform, r, W, E, K, max_tokens, 7);
  auto forward = [&](const Routing& x, float* rw, const float* tw, int64_t T) {
    op.forward({input.data(), T, x.ids.data(), tw}, {recv.data(), rw, nullptr, counts.data()});
  };
  for (int32_t bad : {static_cast<int32_t>(E), -2}) {
    Routing x = rt;
    if (r == last && x.T > 0) x.ids[x.T * K - 1] = bad;
    expect_error([&] { forward(x, nullptr, nullptr, x.T); }, Errc::kInvalidArgument,
                 {"moe_dispatch", "topk_ids", std::to_string(bad)}, "id out of range");
    good();
  }
  expect_error([&] { forward(rt, nullptr, nullptr, r == last ? max_tokens + 1 : rt.T); },
               Errc::kInvalidArgument, {"moe_dispatch", "num_tokens", "max_tokens"},
               "num_tokens > max_tokens");
  good();
  expect_error(
      [&] {
        forward(rt, r == 0 ? w.data() : nullptr, r == last ? nullptr : rt.weights.data(), rt.T);
      },
      Errc::kInvalidArgument, {"moe_dispatch", "recv_weights", "topk_weights"},
      "recv_weights without topk_weights");
  good();
  expect_error(
      [&] {
        op.forward({input.data(), rt.T, rt.ids.data(), nullptr},
                   {recv.data(), nullptr, nullptr, r == last ? nullptr : counts.data()});
      },
      Errc::kInvalidArgument, {"moe_dispatch", "recv_expert_counts"}, "no recv_expert_counts");
  good();
}

// Overflow: every rank fails naming the rank, its row count and the capacity; counts are still
// written, recv is untouched, nothing is dropped; the op works afterwards.
TEST_F(MoeDispatchBadInput, OverflowNamesRankRowsAndCapacity) {
  const int W = world_size(), r = world_rank();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int64_t hidden = 4, max_tokens = 8, K = 2, E = W, cap = 5;
  MoeDispatch op(ctx, {max_tokens, hidden, K, E, cap, DType::kFloat32});
  Routing rt;  // every slot to expert 0 (rank 0): R_0 = W·8·2 > 5
  rt.T = max_tokens;
  rt.ids.assign(static_cast<std::size_t>(rt.T * K), 0);
  rt.weights.assign(rt.ids.size(), 1.0f);
  const Bytes input(static_cast<std::size_t>(rt.T * hidden) * 4, 3);
  Bytes recv(static_cast<std::size_t>(cap * hidden) * 4, kPoison);
  std::vector<int64_t> counts(1, -1);
  int64_t rows = -1;
  const int64_t R0 = W * max_tokens * K;
  expect_error(
      [&] {
        op.forward({input.data(), rt.T, rt.ids.data(), nullptr},
                   {recv.data(), nullptr, nullptr, counts.data(), &rows});
      },
      Errc::kInvalidArgument, {"moe_dispatch", "rank 0", std::to_string(R0), "max_recv_rows=5"},
      "overflow");
  EXPECT_EQ(rows, r == 0 ? R0 : 0) << "rank " << r;
  EXPECT_EQ(counts[0], r == 0 ? R0 : 0) << "rank " << r;
  EXPECT_TRUE(std::all_of(recv.begin(), recv.end(), [](unsigned char b) { return b == kPoison; }))
      << "rank " << r << ": recv written on overflow";
  // One slot per rank to its own expert fits.
  Routing small;
  small.T = 1;
  small.ids.assign(static_cast<std::size_t>(K), -1);
  small.ids[0] = r;
  small.weights.assign(static_cast<std::size_t>(K), 0.5f);
  check_call(op, small, DType::kFloat32, hidden, 1, 3, "after overflow");
}

TEST_F(MoeDispatchBadInput, CreateErrorsReachEveryRank) {
  const int W = world_size(), r = world_rank();
  Context ctx(MPI_COMM_WORLD, test_options());
  auto create = [&](const MoeDispatchOptions& o) { MoeDispatch op(ctx, o); };
  expect_error(
      [&] {
        create({int64_t{1} << 30, 8, 4, W, 0, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"moe_dispatch", "INT32_MAX"}, "T·K overflows int32");
  expect_error(
      [&] {
        create({8, r == W - 1 ? 0 : 8, 2, W, 0, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"moe_dispatch", "hidden"}, "hidden = 0 on one rank");
  if (W > 1)
    expect_error(
        [&] {
          create({8, 8, 2, 2 * W + 1, 0, DType::kFloat32});
        },
        Errc::kInvalidArgument, {"moe_dispatch", "num_experts", "divisible"}, "E % W");
  if (W > 1)
    expect_error(
        [&] {
          create({8, 8, 2, W, 0, r == 0 ? DType::kBFloat16 : DType::kFloat32});
        },
        Errc::kInvalidArgument, {"moe_dispatch", "dtype"}, "dtype differs");
  MoeDispatch op(ctx, {8, 8, 2, 2 * W, 0, DType::kFloat32});  // the context still works
  const Routing rt = make_routing(Route::kSkewed, r, W, 2 * W, 2, 8, 3);
  check_call(op, rt, DType::kFloat32, 8, 3, 1, "after create errors");
}

}  // namespace
}  // namespace fluxcpp::test
