// AllToAllSingle (all-to-all of rows with variable per-peer splits) against MPI_Alltoallv of the
// same rows, bit for bit: the op is a pure copy, so any payload (NaN patterns included) must
// come through unchanged.
#include <algorithm>
#include <cstring>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// ---- split matrices ----------------------------------------------------------------------------

// S[s * W + t]: rows rank s sends to rank t. Rank r passes row r as input_splits and column r
// as output_splits. Every rank builds the same matrix (seeded by the call only).
using Matrix = std::vector<int64_t>;

enum class Pattern {
  kRandom,       // each entry in [0, max_rows / W], about a quarter of them 0
  kOneReceiver,  // every rank sends all its rows to one rank, which receives exactly max_rows
  kAllZero,      // nothing moves: a no-op
  kFull,         // every rank sends and receives exactly max_rows rows
};

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kRandom: return "random";
    case Pattern::kOneReceiver: return "one_receiver";
    case Pattern::kAllZero: return "all_zero";
    case Pattern::kFull: return "full";
  }
  return "?";
}

// W parts adding up to total, at least one of them 0 when W > 1 (at a position that varies).
std::vector<int64_t> composition(int64_t total, int W, uint64_t seed) {
  std::vector<int64_t> cuts{0, total};
  for (int i = 0; i < W - 2; ++i)
    cuts.push_back(static_cast<int64_t>(splitmix(seed) % static_cast<uint64_t>(total + 1)));
  if (W > 1) cuts.push_back(0);  // the part ending at this cut is empty
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> parts(static_cast<std::size_t>(W));
  for (int i = 0; i < W; ++i) parts[i] = cuts[i + 1] - cuts[i];
  std::rotate(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(splitmix(seed) % W),
              parts.end());
  return parts;
}

Matrix make_splits(Pattern p, int W, int64_t max_rows, int call) {
  Matrix S(static_cast<std::size_t>(W) * W, 0);
  uint64_t seed = seed_of(0, call, 77);
  switch (p) {
    case Pattern::kRandom: {
      const uint64_t cap = static_cast<uint64_t>(max_rows / W);
      for (auto& x : S) {
        const uint64_t r = splitmix(seed);
        x = r % 4 == 0 ? 0 : static_cast<int64_t>((r >> 8) % (cap + 1));
      }
      break;
    }
    case Pattern::kOneReceiver: {
      const int t0 = call % W;
      std::vector<int64_t> a = composition(max_rows, W, seed);
      for (int s = 0; s < W; ++s) S[s * W + t0] = a[s];
      break;
    }
    case Pattern::kAllZero: break;
    case Pattern::kFull: {
      std::vector<int64_t> a = composition(max_rows, W, seed);
      for (int s = 0; s < W; ++s)
        for (int t = 0; t < W; ++t) S[s * W + t] = a[(s + t) % W];
      break;
    }
  }
  return S;
}

std::string describe(const Matrix& S, int W) {
  std::string d = "splits [";
  for (int s = 0; s < W; ++s) {
    d += s ? "; " : "";
    for (int t = 0; t < W; ++t) d += (t ? " " : "") + std::to_string(S[s * W + t]);
  }
  return d + "]";
}

std::vector<int64_t> row_of(const Matrix& S, int W, int r) {
  return std::vector<int64_t>(S.begin() + r * W, S.begin() + (r + 1) * W);
}

std::vector<int64_t> column_of(const Matrix& S, int W, int r) {
  std::vector<int64_t> c(static_cast<std::size_t>(W));
  for (int s = 0; s < W; ++s) c[s] = S[s * W + r];
  return c;
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t x = 0;
  for (int64_t e : v) x += e;
  return x;
}

// ---- data and the MPI reference ------------------------------------------------------------

// Deterministic bytes that differ by rank, call and position (any bit pattern).
void fill(Bytes& v, int rank, int call) {
  uint64_t x = seed_of(rank, call, 5);
  std::size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    const uint64_t r = splitmix(x);
    std::memcpy(v.data() + i, &r, 8);
  }
  for (const uint64_t r = splitmix(x); i < v.size(); ++i)
    v[i] = static_cast<unsigned char>(r >> (8 * (i % 8)));
}

// MPI_Alltoallv of `input` (rows of row_bytes bytes) with the splits of S.
Bytes mpi_alltoallv(const Bytes& input, const Matrix& S, std::size_t row_bytes) {
  const int W = world_size(), r = world_rank();
  std::vector<int> sc(W), sd(W), rc(W), rd(W);
  int so = 0, ro = 0;
  for (int t = 0; t < W; ++t) {
    sc[t] = static_cast<int>(S[r * W + t] * static_cast<int64_t>(row_bytes));
    sd[t] = so;
    so += sc[t];
    rc[t] = static_cast<int>(S[t * W + r] * static_cast<int64_t>(row_bytes));
    rd[t] = ro;
    ro += rc[t];
  }
  Bytes out(static_cast<std::size_t>(ro));
  MPI_Alltoallv(input.data(), sc.data(), sd.data(), MPI_BYTE, out.data(), rc.data(), rd.data(),
                MPI_BYTE, MPI_COMM_WORLD);
  return out;
}

// Compares the received rows bit for bit; reports the first mismatch as (sender, row of the
// sender's block, byte in row, expected, got). Returns true if equal.
bool expect_rows_equal(const Bytes& want, const Bytes& got, const Matrix& S, std::size_t row_bytes,
                       const std::string& what) {
  const int W = world_size(), r = world_rank();
  if (got.size() < want.size()) {
    ADD_FAILURE() << what << ": rank " << r << ": output too small";
    return false;
  }
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size()) == 0) return true;
  std::size_t i = 0;
  while (want[i] == got[i]) ++i;
  int64_t row = static_cast<int64_t>(i / row_bytes);
  int s = 0;
  while (s < W - 1 && row >= S[s * W + r]) row -= S[s++ * W + r];
  std::size_t bad = 0;
  for (std::size_t j = i; j < want.size(); ++j) bad += want[j] != got[j];
  ADD_FAILURE() << what << ": rank " << r << ": rows from rank " << s << " differ at row " << row
                << " of its block, byte " << i % row_bytes << ": expected " << int(want[i])
                << ", got " << int(got[i]) << " (" << bad << " of " << want.size()
                << " bytes differ)";
  return false;
}

// Output buffers start as these bytes: unwritten rows fail the comparison.
constexpr unsigned char kOutPoison = 0xEE;

// One forward with the splits of S on fresh data, checked against MPI_Alltoallv. Collective.
// null_when_empty: pass NULL for an input or output of 0 rows. Returns false (on this rank) if
// anything failed.
bool check_forward(AllToAllSingle& op, const Matrix& S, int call, const std::string& what,
                   bool null_when_empty = false) {
  const int W = world_size(), r = world_rank();
  const auto& o = op.options();
  const std::size_t row_bytes = static_cast<std::size_t>(o.n) * dtype_size(o.dtype);
  const std::vector<int64_t> in_splits = row_of(S, W, r), out_splits = column_of(S, W, r);
  Bytes input(static_cast<std::size_t>(sum(in_splits)) * row_bytes);
  fill(input, r, call);
  Bytes output(static_cast<std::size_t>(sum(out_splits)) * row_bytes, kOutPoison);
  const Bytes ref = mpi_alltoallv(input, S, row_bytes);
  if (!expect_no_throw(
          [&] {
            op.forward(input.empty() && null_when_empty ? nullptr : input.data(), in_splits.data(),
                       output.empty() && null_when_empty ? nullptr : output.data(),
                       out_splits.data());
          },
          what + " forward"))
    return false;
  return expect_rows_equal(ref, output, S, row_bytes, what);
}

// ---- 1. correctness over dtypes, row lengths and split patterns --------------------------------

struct Shape {
  DType dtype;
  int64_t n;
};

std::string shape_name(const Shape& s) {
  return std::string(dtype_name(s.dtype)) + "_n" + std::to_string(s.n);
}

void PrintTo(const Shape& s, std::ostream* os) {
  *os << shape_name(s);
}

class AllToAllSingleTest : public MpiTest, public ::testing::WithParamInterface<Shape> {};

// One op; a sequence of calls whose splits change every call and cover every pattern (random
// with zeros, everything to one rank, all zero, sums of exactly max_rows), some with NULL for
// empty buffers.
TEST_P(AllToAllSingleTest, MatchesMpiAlltoallv) {
  const Shape sh = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t max_rows = 10 * W + 3;
  AllToAllSingle op(ctx, {max_rows, sh.n, sh.dtype});
  const Pattern seq[] = {Pattern::kRandom,  Pattern::kFull,        Pattern::kOneReceiver,
                         Pattern::kAllZero, Pattern::kRandom,      Pattern::kOneReceiver,
                         Pattern::kFull,    Pattern::kAllZero,     Pattern::kRandom,
                         Pattern::kFull,    Pattern::kOneReceiver, Pattern::kRandom};
  int call = 0;
  for (Pattern p : seq) {
    const Matrix S = make_splits(p, W, max_rows, call);
    const std::string what = shape_name(sh) + " call " + std::to_string(call) + " " +
                             pattern_name(p) + " " + describe(S, W);
    check_forward(op, S, call, what, /*null_when_empty=*/call % 2 == 1);
    ++call;
    if (any_rank(HasFailure())) break;  // uniform
  }
}

std::vector<Shape> shapes() {
  std::vector<Shape> v;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16})
    for (int64_t n : {1, 3, 127, 1000}) v.push_back({d, n});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AllToAllSingleTest, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return shape_name(i.param);
                         });

// ---- 2. blocks on both sides of the copy-engine threshold --------------------------------------

class AllToAllSingleLarge : public MpiTest, public ::testing::WithParamInterface<DType> {};

// Blocks of 256 KiB and more (the single-copy engine under FLUXCPP_COPY_ENGINE=auto where the
// create's probe finds it fast, or with FLUXCPP_CMA_MAX_RATIO=1e9: the .cma_auto run) alternate
// with small ones (staged through shared memory) on one op, splits changing every call.
TEST_P(AllToAllSingleLarge, LargeAndSmallBlocksAlternate) {
  const DType dt = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options(60.0));
  const int W = ctx.world_size();
  const int64_t n = 1000;
  const std::size_t row_bytes = static_cast<std::size_t>(n) * dtype_size(dt);
  const int64_t big = static_cast<int64_t>((256 * 1024) / row_bytes) + 5;  // rows: > 256 KiB
  const int64_t max_rows = big * W;
  AllToAllSingle op(ctx, {max_rows, n, dt});
  for (int call = 0; call < 10; ++call) {
    Matrix S;
    std::string kind;
    switch (call % 5) {
      case 0:  // every block big, sums exactly max_rows
        S.assign(static_cast<std::size_t>(W) * W, big);
        kind = "all blocks big";
        break;
      case 1:  // small blocks: at most 3 rows (< 16 KiB)
        S = make_splits(Pattern::kRandom, W, 3 * W, call);
        kind = "small blocks";
        break;
      case 2:  // everything to one rank: one block of up to max_rows
        S = make_splits(Pattern::kOneReceiver, W, max_rows, call);
        kind = "one receiver";
        break;
      case 3:  // one big block per sender, the rest small or empty
        S = make_splits(Pattern::kRandom, W, 2 * W, call);
        for (int s = 0; s < W; ++s) S[s * W + (s + 1) % W] = big - 3;
        kind = "mixed";
        break;
      case 4:  // random, up to max_rows
        S = make_splits(Pattern::kRandom, W, max_rows, call);
        kind = "random";
        break;
    }
    const std::string what = std::string(dtype_name(dt)) + " call " + std::to_string(call) + " " +
                             kind + " " + describe(S, W);
    check_forward(op, S, call, what);
    if (any_rank(HasFailure())) break;  // uniform
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, AllToAllSingleLarge,
                         ::testing::Values(DType::kFloat32, DType::kFloat64, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

// ---- 3. many consecutive calls -----------------------------------------------------------------

class AllToAllSingleCalls : public MpiTest {};

// 200 forwards on one op, the same input and output buffers every call with new contents and new
// splits (every pattern, including no-ops): a stale row, a stale split or an early read shows up
// as a mismatch.
TEST_F(AllToAllSingleCalls, TwoHundredCallsWithChangingDataAndSplits) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t n = 7, max_rows = 6 * W + 1;
  const std::size_t row_bytes = static_cast<std::size_t>(n) * 4;
  AllToAllSingle op(ctx, {max_rows, n, DType::kFloat32});
  Bytes input(static_cast<std::size_t>(max_rows) * row_bytes),
      output(static_cast<std::size_t>(max_rows) * row_bytes);
  for (int call = 0; call < 200; ++call) {
    const Pattern p = call % 10 == 9  ? Pattern::kAllZero
                      : call % 7 == 3 ? Pattern::kOneReceiver
                      : call % 5 == 2 ? Pattern::kFull
                                      : Pattern::kRandom;
    const Matrix S = make_splits(p, W, max_rows, call + 1000);
    const std::vector<int64_t> in_splits = row_of(S, W, r), out_splits = column_of(S, W, r);
    const std::size_t in_bytes = static_cast<std::size_t>(sum(in_splits)) * row_bytes;
    const std::size_t out_bytes = static_cast<std::size_t>(sum(out_splits)) * row_bytes;
    Bytes mine(in_bytes);
    fill(mine, r, call);
    if (in_bytes > 0) std::memcpy(input.data(), mine.data(), in_bytes);
    std::fill(output.begin(), output.end(), kOutPoison);
    const Bytes ref = mpi_alltoallv(mine, S, row_bytes);
    const std::string what =
        "call " + std::to_string(call) + " " + pattern_name(p) + " " + describe(S, W);
    expect_no_throw(
        [&] { op.forward(input.data(), in_splits.data(), output.data(), out_splits.data()); },
        what + " forward");
    if (!HasFailure())
      expect_rows_equal(ref, Bytes(output.begin(), output.begin() + out_bytes), S, row_bytes, what);
    if (any_rank(HasFailure())) break;  // uniform
  }
}

// ---- 4. bad inputs -----------------------------------------------------------------------------

class AllToAllSingleBadInput : public MpiTest {};

TEST_F(AllToAllSingleBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t n = 5, max_rows = 4 * W;
  const std::string op_name = "all_to_all_single";
  AllToAllSingle op(ctx, {max_rows, n, DType::kFloat64});
  // Buffers large enough for any of the calls below, so that a missed check cannot overrun.
  Bytes in((max_rows + W + 2) * n * 8), out((max_rows + W * W + 2) * n * 8);
  int call = 0;
  // After every error: a good call with new splits and data, checked.
  auto good_call = [&](const std::string& after) {
    const Matrix S = make_splits(call % 2 ? Pattern::kFull : Pattern::kRandom, W, max_rows, call);
    check_forward(op, S, call, "good call after " + after + " " + describe(S, W));
    ++call;
  };
  // A forward with the splits of S, then edited on this rank by `edit`.
  auto forward_with = [&](const Matrix& S, const auto& edit) {
    std::vector<int64_t> is = row_of(S, W, r), os = column_of(S, W, r);
    const void* ip = in.data();
    void* op_out = out.data();
    const int64_t* isp = is.data();
    const int64_t* osp = os.data();
    edit(is, os, ip, op_out, isp, osp);
    op.forward(ip, isp, op_out, osp);
  };
  const Matrix ones(static_cast<std::size_t>(W) * W, 1);

  {
    // Rank 0 sends 2 rows to rank 1 (to itself when W == 1), which expects 1.
    const int t = W > 1 ? 1 : 0;
    std::vector<std::string> needles = {op_name, "split"};
    if (W > 1) needles.insert(needles.end(), {"rank 0", "rank 1"});
    expect_error(
        [&] {
          forward_with(ones, [&](auto& is, auto&, auto&, auto&, auto&, auto&) {
            if (r == 0) is[t] = 2;
          });
        },
        Errc::kInvalidArgument, needles, "rank 0 sends more rows than its receiver expects");
    good_call("split mismatch (sender)");
  }
  {
    // Rank W-1 expects no rows from rank 0, which sends 1.
    std::vector<std::string> needles = {op_name, "split"};
    if (W > 1) needles.insert(needles.end(), {"rank 0", "rank " + std::to_string(W - 1)});
    expect_error(
        [&] {
          forward_with(ones, [&](auto&, auto& os, auto&, auto&, auto&, auto&) {
            if (r == W - 1) os[0] = 0;
          });
        },
        Errc::kInvalidArgument, needles, "rank W-1 expects fewer rows than rank 0 sends");
    good_call("split mismatch (receiver)");
  }
  {
    // Rank W-1 sends -1 rows to rank 0, which expects -1: consistent, but negative.
    Matrix S = ones;
    S[(W - 1) * W + 0] = -1;
    expect_error([&] { forward_with(S, [](auto&...) {}); }, Errc::kInvalidArgument, {op_name, "-1"},
                 "negative split");
    good_call("negative split");
  }
  {
    // Rank W-1 sends max_rows + 1 rows in all (every receiver within max_rows).
    Matrix S(static_cast<std::size_t>(W) * W, 0);
    for (int t = 0; t < W; ++t) S[(W - 1) * W + t] = (max_rows + 1) / W;
    S[(W - 1) * W] += (max_rows + 1) % W;
    expect_error([&] { forward_with(S, [](auto&...) {}); }, Errc::kInvalidArgument,
                 {op_name, "max_rows"}, "sum of input_splits > max_rows");
    good_call("input sum > max_rows");
  }
  if (W > 1) {
    // Every rank sends max_rows / W + 1 rows to rank 0, which receives max_rows + W in all.
    Matrix S(static_cast<std::size_t>(W) * W, 0);
    for (int s = 0; s < W; ++s) S[s * W] = max_rows / W + 1;
    expect_error([&] { forward_with(S, [](auto&...) {}); }, Errc::kInvalidArgument,
                 {op_name, "max_rows"}, "sum of output_splits > max_rows");
    good_call("output sum > max_rows");
  }
  expect_error(
      [&] {
        forward_with(ones, [&](auto&, auto&, auto& ip, auto&, auto&, auto&) {
          if (r == W - 1) ip = nullptr;
        });
      },
      Errc::kInvalidArgument, {op_name, "input"}, "NULL input with rows on rank W-1");
  good_call("NULL input");
  expect_error(
      [&] {
        forward_with(ones, [&](auto&, auto&, auto&, auto& o, auto&, auto&) {
          if (r == 0) o = nullptr;
        });
      },
      Errc::kInvalidArgument, {op_name, "output"}, "NULL output with rows on rank 0");
  good_call("NULL output");
  expect_error(
      [&] {
        forward_with(ones, [&](auto&, auto&, auto&, auto&, auto& isp, auto&) {
          if (r == 0) isp = nullptr;
        });
      },
      Errc::kInvalidArgument, {op_name, "input_splits"}, "NULL input_splits on rank 0");
  good_call("NULL input_splits");
  expect_error(
      [&] {
        forward_with(ones, [&](auto&, auto&, auto&, auto&, auto&, auto& osp) {
          if (r == W - 1) osp = nullptr;
        });
      },
      Errc::kInvalidArgument, {op_name, "output_splits"}, "NULL output_splits on rank W-1");
  good_call("NULL output_splits");
  expect_error([&] { op.forward(in.data(), nullptr, out.data(), nullptr); }, Errc::kInvalidArgument,
               {op_name}, "NULL splits everywhere");
  good_call("NULL splits everywhere");
  // Nothing to move and no buffers: a valid no-op.
  {
    const std::vector<int64_t> zeros(static_cast<std::size_t>(W), 0);
    expect_no_throw([&] { op.forward(nullptr, zeros.data(), nullptr, zeros.data()); },
                    "all-zero splits with NULL buffers");
    good_call("all-zero no-op");
  }
}

TEST_F(AllToAllSingleBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const std::string op_name = "all_to_all_single";
  auto create = [&](AllToAllSingleOptions o) { AllToAllSingle op(ctx, o); };
  const AllToAllSingleOptions good{4 * W, 8, DType::kFloat32};
  AllToAllSingleOptions o = good;
  o.n = 0;
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "n"}, "n = 0");
  o = good;
  if (r == 0) o.n = 0;
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "n"}, "n = 0 on rank 0");
  o = good;
  o.max_rows = -1;
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "max_rows"}, "max_rows = -1");
  o = good;
  if (r == W - 1) o.max_rows = -5;
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "max_rows"},
               "max_rows = -5 on rank W-1");
  o = good;
  if (r == 0) o.dtype = static_cast<DType>(7);
  expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "dtype"},
               "invalid dtype on rank 0");
  if (W > 1) {
    o = good;
    if (r == W - 1) o.n = 9;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "n"}, "n differs");
    o = good;
    if (r == 0) o.max_rows = 5 * W;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "max_rows"},
                 "max_rows differs");
    o = good;
    if (r == W - 1) o.dtype = DType::kBFloat16;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, {op_name, "dtype"}, "dtype differs");
  }
  // A good op on the same context still works.
  if (!any_rank(HasFailure())) {
    AllToAllSingle op(ctx, good);
    check_forward(op, make_splits(Pattern::kRandom, W, good.max_rows, 3), 3,
                  "good op after create errors");
  }
}

TEST_F(AllToAllSingleBadInput, ClosedContext) {
  Context ctx(MPI_COMM_WORLD, test_options());
  ctx.close();
  expect_error(
      [&] {
        AllToAllSingle op(ctx, {4, 8, DType::kFloat32});
      },
      Errc::kInvalidUsage, {"all_to_all_single", "closed"}, "create on a closed context");
}

// ---- 5. lifetime -------------------------------------------------------------------------------

class AllToAllSingleLifetime : public MpiTest {};

// A moved op works; once the ops (and the context) are gone, no fluxcpp segment this process
// created is left in /dev/shm.
TEST_F(AllToAllSingleLifetime, MoveAndNoShmLeft) {
  const int W = world_size();
  {
    Context ctx(MPI_COMM_WORLD, test_options());
    AllToAllSingle a(ctx, {8 * W, 33, DType::kBFloat16});
    check_forward(a, make_splits(Pattern::kFull, W, 8 * W, 1), 1, "before move");
    AllToAllSingle b(std::move(a));
    check_forward(b, make_splits(Pattern::kRandom, W, 8 * W, 2), 2, "moved-to op");
    AllToAllSingle c(ctx, {4 * W, 2, DType::kFloat32});
    c = std::move(b);  // c's own op is released here
    check_forward(c, make_splits(Pattern::kOneReceiver, W, 8 * W, 3), 3, "move-assigned op");
    // Large blocks as well (the single-copy path has its own resources).
    AllToAllSingle big(ctx, {80 * W, 1000, DType::kFloat32});
    check_forward(big, make_splits(Pattern::kFull, W, 80 * W, 4), 4, "large op");
  }
  expect_no_segments_left();
}

}  // namespace
}  // namespace fluxcpp::test
