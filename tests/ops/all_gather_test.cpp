// AllGather against MPI_Allgather, bit for bit.
#include <cstring>
#include <thread>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// Deterministic bytes that differ by rank, call and position (any bit pattern: comparisons are
// bitwise, so NaN payloads must survive too).
void fill(std::vector<unsigned char>& v, int rank, int call) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(rank) + 1) +
               0xD1B54A32D192ED03ull * (call + 1);
  for (auto& b : v) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    b = static_cast<unsigned char>((x * 0x2545F4914F6CDD1Dull) >> 56);
  }
}

// Compares bytes; reports the first mismatch as (row, byte in row, expected, got).
void expect_equal_bytes(const std::vector<unsigned char>& want,
                        const std::vector<unsigned char>& got, std::size_t row_bytes,
                        const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (want[i] != got[i]) {
      FAIL() << what << ": rank " << world_rank() << " mismatch at row " << i / row_bytes
             << " byte " << i % row_bytes << ": expected " << int(want[i]) << ", got "
             << int(got[i]);
    }
}

struct Shape {
  DType dtype;
  int64_t rows_per_rank;
  int64_t k;
};

class AllGatherTest : public MpiTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(AllGatherTest, MatchesMpiAllgather) {
  const Shape s = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t m = s.rows_per_rank * W;
  const std::size_t esz = dtype_size(s.dtype);
  AllGather op(ctx, {m, s.k, s.dtype});
  const std::size_t shard = static_cast<std::size_t>(s.rows_per_rank * s.k) * esz;
  std::vector<unsigned char> in(shard), out(shard * W, 0xEE);
  for (int call = 0; call < 3; ++call) {
    fill(in, ctx.rank(), call);
    op.forward(in.data(), m, out.data());
    const Bytes ref = mpi_allgather(in, s.rows_per_rank, s.k * esz);
    expect_equal_bytes(ref, out, s.k * esz, "call " + std::to_string(call));
  }
}

std::vector<Shape> shapes() {
  std::vector<Shape> v;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16})
    for (int64_t rows : {0, 1, 7, 1500})
      for (int64_t k : {1, 3, 1000}) v.push_back({d, rows, k});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AllGatherTest, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::string(dtype_name(i.param.dtype)) + "_rows" +
                                  std::to_string(i.param.rows_per_rank) + "_k" +
                                  std::to_string(i.param.k);
                         });

class AllGatherCalls : public MpiTest {};

// Many consecutive calls on one op with changing data and sizes: epochs, chunk signals and
// buffer reuse must never let a stale or early byte through.
TEST_F(AllGatherCalls, HundredsOfCallsWithChangingData) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t k = 257, max_rows = 700;
  AllGather op(ctx, {max_rows * W, k, DType::kFloat32});
  const int64_t rows_cycle[] = {700, 1, 0, 33, 512, 699};
  for (int call = 0; call < 120; ++call) {
    int64_t rows = rows_cycle[call % 6];
    std::size_t shard = static_cast<std::size_t>(rows * k) * 4;
    std::vector<unsigned char> in(shard), out(shard * W);
    fill(in, ctx.rank(), call);
    op.forward(in.data(), rows * W, out.data());
    const Bytes ref = mpi_allgather(in, rows, k * 4);
    expect_equal_bytes(ref, out, k * 4, "call " + std::to_string(call));
    if (HasFailure()) break;
  }
}

TEST_F(AllGatherCalls, InPlace) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t rows = 100, k = 64;
  AllGather op(ctx, {rows * W, k, DType::kFloat64});
  const std::size_t shard = rows * k * 8;
  std::vector<unsigned char> in(shard), out(shard * W);
  fill(in, ctx.rank(), 5);
  std::memcpy(out.data() + shard * ctx.rank(), in.data(), shard);
  op.forward(out.data() + shard * ctx.rank(), rows * W, out.data());
  const Bytes ref = mpi_allgather(in, rows, k * 8);
  expect_equal_bytes(ref, out, k * 8, "in place");
}

// Runs fn, expecting Error(code) whose message contains every string of `needles`. Unlike
// test_data.hpp's expect_error (which takes a `what`), messages start with the rank, and an
// exception other than fluxcpp::Error propagates.
template <typename F>
void expect_error(F&& fn, Errc code, std::vector<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "rank " << world_rank() << ": no error raised";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code))
        << "rank " << world_rank() << ": " << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "rank " << world_rank() << ": message lacks '" << n << "': " << e.what();
  }
}

class AllGatherBadInput : public MpiTest {};

TEST_F(AllGatherBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t k = 16;
  AllGather op(ctx, {8 * W, k, DType::kFloat32});
  std::vector<float> in(8 * k, 1.0f), out(8 * W * k);
  if (W > 1)
    expect_error([&] { op.forward(in.data(), W + 1, out.data()); }, Errc::kInvalidArgument,
                 {"all_gather", "m="});
  expect_error([&] { op.forward(in.data(), 9 * W, out.data()); }, Errc::kInvalidArgument,
               {"all_gather", "max_m"});
  expect_error([&] { op.forward(r == W - 1 ? nullptr : in.data(), W, out.data()); },
               Errc::kInvalidArgument,
               {"all_gather", "input is NULL", "rank " + std::to_string(W - 1)});
  expect_error([&] { op.forward(in.data(), W, r == 0 ? nullptr : out.data()); },
               Errc::kInvalidArgument, {"output is NULL"});
  if (W > 1)
    expect_error([&] { op.forward(in.data(), r == 0 ? 2 * W : W, out.data()); },
                 Errc::kInvalidArgument, {"disagree", "m"});
  // Still usable after all of that.
  std::vector<float> ref(8 * W * k);
  for (auto& x : in) x = static_cast<float>(r);
  op.forward(in.data(), 8 * W, out.data());
  MPI_Allgather(in.data(), 8 * k, MPI_FLOAT, ref.data(), 8 * k, MPI_FLOAT, MPI_COMM_WORLD);
  EXPECT_EQ(0, std::memcmp(ref.data(), out.data(), ref.size() * 4));
}

TEST_F(AllGatherBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  if (W > 1)
    expect_error(
        [&] {
          AllGather op(ctx, {4 * W, r == W - 1 ? 1000 : 1024, DType::kFloat32});
        },
        Errc::kInvalidArgument, {"all_gather", "k", "1000", "1024"});
  expect_error(
      [&] {
        AllGather op(ctx, {4 * W, r == 0 ? 0 : 8, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"all_gather", "k=0"});
  expect_error(
      [&] {
        AllGather op(ctx, {4 * W, 8, static_cast<DType>(r == 0 ? 7 : 0)});
      },
      Errc::kInvalidArgument, {"all_gather", "dtype"});
  expect_error(
      [&] {
        AllGather op(ctx, {-1, 8, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"max_m"});
}

TEST_F(AllGatherBadInput, ProtocolSettingsMustAgree) {
  // A different pipeline chunk on one rank would silently misread chunks: refused at create.
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Context ctx(MPI_COMM_WORLD, test_options());
  if (world_rank() == 0) setenv("FLUXCPP_CHUNK_KB", "4", 1);
  Context odd(MPI_COMM_WORLD, test_options());
  unsetenv("FLUXCPP_CHUNK_KB");
  expect_error(
      [&] {
        AllGather op(odd, {4 * world_size(), 8, DType::kFloat32});
      },
      Errc::kInvalidArgument, {"FLUXCPP_CHUNK_KB", "disagree"});
}

TEST_F(AllGatherBadInput, ClosedContext) {
  Context ctx(MPI_COMM_WORLD, test_options());
  ctx.close();
  expect_error(
      [&] {
        AllGather op(ctx, {4 * world_size(), 8, DType::kFloat32});
      },
      Errc::kInvalidUsage, {"closed"});
}

class AllGatherFault : public MpiTest {};

// A rank that skips a call: the others fail with kTimeout within timeout_s plus a little, naming
// the missing rank when they wait on it directly, and nothing is left in /dev/shm.
TEST_F(AllGatherFault, SkippedCallTimesOut) {
  const int W = world_size();
  if (W < 2) GTEST_SKIP() << "needs two ranks";
  const double timeout = 1.5;
  // Only what this test makes counts: a name of this pid from before it (a dead process's whose
  // pid this one reuses, while its segment waits for a sweep) is not its leak.
  const std::vector<std::string> before = fluxcpp_shm_entries(/*own_only=*/true);
  Context ctx(MPI_COMM_WORLD, test_options(timeout));
  const int skipper = W - 1;
  AllGather op(ctx, {4 * W, 32, DType::kFloat32});
  std::vector<float> in(4 * 32), out(4 * W * 32);
  op.forward(in.data(), 4 * W, out.data());  // a good call first
  if (ctx.rank() != skipper) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> needles = {"all_gather", "timed out"};
    bool direct = ctx.num_hosts() == 1;  // across hosts the wait may be on an intermediary
    if (direct) needles.push_back("rank " + std::to_string(skipper));
    expect_error([&] { op.forward(in.data(), 4 * W, out.data()); }, Errc::kTimeout, needles);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, timeout + 3.0) << "rank " << ctx.rank();
    EXPECT_GE(secs, timeout * 0.9) << "rank " << ctx.rank();
    expect_error([&] { op.forward(in.data(), 4 * W, out.data()); }, Errc::kInvalidUsage,
                 {"destroyed"});
  }
  for (const std::string& s : fluxcpp_shm_entries(/*own_only=*/true))
    if (std::find(before.begin(), before.end(), s) == before.end())
      ADD_FAILURE() << "rank " << ctx.rank() << ": /dev/shm/" << s << " while the op is alive";
}

}  // namespace
}  // namespace fluxcpp::test
