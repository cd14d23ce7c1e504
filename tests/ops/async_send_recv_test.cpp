// AsyncSendRecv against MPI moving the same messages (MPI_Sendrecv around a ring, MPI_Send /
// MPI_Recv down a line), bit for bit: the op is a pure copy. Random row counts (0 included),
// random delays on both sides, num_slots 1..4 and many more messages than slots; then the error
// rules: too-small receive buffers, bad arguments, a receive with no sender (kTimeout within the
// timeout), and isend data that must not be read after send_wait.
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// memcmp / memcpy that accept empty ranges (an empty vector's data() may be null).
int mem_cmp(const void* a, const void* b, std::size_t n) {
  return n == 0 ? 0 : std::memcmp(a, b, n);
}
void mem_copy(void* d, const void* s, std::size_t n) {
  if (n != 0) std::memcpy(d, s, n);
}

constexpr int64_t kMaxM = 37, kN = 19;

struct Case {
  int slots;
  DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const char* t = i.param.dtype == DType::kFloat32   ? "f32"
                  : i.param.dtype == DType::kFloat64 ? "f64"
                                                     : "bf16";
  return std::string("slots") + std::to_string(i.param.slots) + "_" + t;
}

std::size_t row_bytes(DType t) {
  return static_cast<std::size_t>(kN) * dtype_size(t);
}

// Row count of message q from src to dst: random in [0, kMaxM], every fifth one empty.
int64_t rows_of(int src, int dst, int q) {
  uint64_t s = seed_of(src, q, 1000 + dst);
  return q % 5 == 3 ? 0 : static_cast<int64_t>(splitmix(s) % (kMaxM + 1));
}

Bytes message(DType t, int src, int dst, int q) {
  return random_tensor(t, static_cast<std::size_t>(rows_of(src, dst, q) * kN),
                       seed_of(src, q, 2000 + dst));
}

// Sleeps 0..150 us about half of the time: the two sides of a pair drift apart.
void jitter(std::mt19937& rng) {
  if (rng() % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 150));
}

AsyncSendRecvOptions options(const Case& c, std::optional<std::vector<int>> peers = {}) {
  AsyncSendRecvOptions o;
  o.max_m = kMaxM;
  o.n = kN;
  o.dtype = c.dtype;
  o.num_slots = c.slots;
  o.peers = std::move(peers);
  return o;
}

class AsyncSendRecvTest : public MpiTest, public ::testing::WithParamInterface<Case> {};

// Every rank sends to r+1 and receives from r-1 (the default ring), alternating send and isend.
TEST_P(AsyncSendRecvTest, RingMatchesSendrecv) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "a ring needs two ranks (W = 1)";
  const Case c = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  AsyncSendRecv op(ctx, options(c));
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  const int N = 6 * c.slots + 9;
  const std::size_t row = row_bytes(c.dtype);
  std::mt19937 rng(77 + r);
  std::vector<Bytes> sent(N), got(N, Bytes(kMaxM * row));
  std::vector<int64_t> got_rows(N);
  std::vector<uint64_t> pending;
  for (int q = 0; q < N; ++q) {
    sent[q] = message(c.dtype, r, next, q);
    const int64_t m = rows_of(r, next, q);
    const uint64_t seq =
        q % 3 == 1 ? op.isend(next, sent[q].data(), m) : op.send(next, sent[q].data(), m);
    if (q % 3 == 1) pending.push_back(seq);
    EXPECT_EQ(seq, static_cast<uint64_t>(q + 1));
    jitter(rng);
    got_rows[q] = op.recv(prev, got[q].data(), kMaxM);
    if (!pending.empty() && rng() % 3 == 0) {
      op.send_wait(next, pending.front());
      pending.erase(pending.begin());
    }
  }
  for (uint64_t s : pending) op.send_wait(next, s);
  for (int q = 0; q < N; ++q) {
    Bytes ref(kMaxM * row);
    MPI_Status st;
    MPI_Sendrecv(sent[q].data(), static_cast<int>(sent[q].size()), MPI_BYTE, next, q, ref.data(),
                 static_cast<int>(ref.size()), MPI_BYTE, prev, q, MPI_COMM_WORLD, &st);
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    ASSERT_EQ(got_rows[q] * static_cast<int64_t>(row), count)
        << "message " << q + 1 << " from " << prev;
    EXPECT_EQ(mem_cmp(got[q].data(), ref.data(), static_cast<std::size_t>(count)), 0)
        << "rank " << r << ": message " << q + 1 << " from rank " << prev << " differs";
  }
  op.close();
}

// A line of W stages: stage 0 sends N messages, each middle stage receives and forwards them
// (isend from a buffer kept until send_wait), the last only receives.
TEST_P(AsyncSendRecvTest, LineMatchesSendRecv) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "a line needs two stages (W = 1)";
  const Case c = GetParam();
  std::vector<int> peers;
  if (r > 0) peers.push_back(r - 1);
  if (r < W - 1) peers.push_back(r + 1);
  Context ctx(MPI_COMM_WORLD, test_options());
  AsyncSendRecv op(ctx, options(c, peers));
  const int N = 8 * c.slots + 5;
  const std::size_t row = row_bytes(c.dtype);
  std::mt19937 rng(91 + r);
  std::vector<Bytes> got(N, Bytes(kMaxM * row));
  std::vector<int64_t> rows(N);
  std::vector<uint64_t> seqs(N, 0);
  for (int q = 0; q < N; ++q) {
    if (r == 0) {
      got[q] = message(c.dtype, 0, 1, q);
      rows[q] = rows_of(0, 1, q);
    } else {
      rows[q] = op.recv(r - 1, got[q].data(), kMaxM);
    }
    jitter(rng);
    if (r < W - 1)
      seqs[q] =
          q % 2 ? op.isend(r + 1, got[q].data(), rows[q]) : op.send(r + 1, got[q].data(), rows[q]);
  }
  if (r < W - 1)
    for (int q = 0; q < N; ++q) op.send_wait(r + 1, seqs[q]);
  // The same line through MPI.
  for (int q = 0; q < N; ++q) {
    Bytes ref = r == 0 ? message(c.dtype, 0, 1, q) : Bytes(kMaxM * row);
    int count = static_cast<int>(rows_of(0, 1, q) * static_cast<int64_t>(row));
    if (r > 0) {
      MPI_Status st;
      MPI_Recv(ref.data(), static_cast<int>(ref.size()), MPI_BYTE, r - 1, q, MPI_COMM_WORLD, &st);
      MPI_Get_count(&st, MPI_BYTE, &count);
      ASSERT_EQ(rows[q] * static_cast<int64_t>(row), count) << "message " << q + 1;
      EXPECT_EQ(mem_cmp(got[q].data(), ref.data(), static_cast<std::size_t>(count)), 0)
          << "rank " << r << ": message " << q + 1 << " differs";
    }
    if (r < W - 1) MPI_Send(ref.data(), count, MPI_BYTE, r + 1, q, MPI_COMM_WORLD);
  }
  op.close();
}

INSTANTIATE_TEST_SUITE_P(Slots, AsyncSendRecvTest,
                         ::testing::Values(Case{1, DType::kFloat32}, Case{2, DType::kBFloat16},
                                           Case{3, DType::kFloat64}, Case{4, DType::kFloat32}),
                         case_name);

class AsyncSendRecvErrors : public MpiTest {};

// Bad arguments fail the caller alone and send nothing; a too-small buffer leaves the message
// queued; m = 0 is a message; probe sees what arrived.
TEST_F(AsyncSendRecvErrors, ArgumentsAndTooSmallBuffer) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "needs a peer (W = 1)";
  Context ctx(MPI_COMM_WORLD, test_options());
  AsyncSendRecv op(ctx, options({2, DType::kFloat32}));
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  const std::size_t row = row_bytes(DType::kFloat32);
  Bytes data = message(DType::kFloat32, r, next, 4);  // rows_of(.., 4) rows, at most kMaxM
  Bytes big(static_cast<std::size_t>(kMaxM + 1) * row);
  const int stranger = W >= 4 ? (r + 2) % W : r;
  expect_error([&] { op.send(stranger, data.data(), 1); }, Errc::kInvalidArgument,
               {"async_send_recv", "dst=" + std::to_string(stranger), "not a peer"},
               "send to a non-peer");
  expect_error([&] { op.send(W, data.data(), 1); }, Errc::kInvalidArgument, {"not a peer"},
               "send to rank W");
  expect_error([&] { op.isend(next, big.data(), kMaxM + 1); }, Errc::kInvalidArgument,
               {"m=38", "[0, 37]"}, "isend of too many rows");
  expect_error([&] { op.send(next, data.data(), -1); }, Errc::kInvalidArgument, {"m=-1"}, "m < 0");
  expect_error([&] { op.send(next, nullptr, 2); }, Errc::kInvalidArgument, {"data is NULL"},
               "NULL data");
  expect_error([&] { op.send_wait(next, 1); }, Errc::kInvalidArgument, {"never sent"},
               "send_wait before a send");
  expect_error([&] { (void)op.send_test(next, 0); }, Errc::kInvalidArgument, {"message 0"},
               "send_test of 0");
  expect_error([&] { op.recv(prev, nullptr, 3); }, Errc::kInvalidArgument, {"out is NULL"},
               "NULL out");
  expect_error([&] { op.recv(prev, big.data(), -2); }, Errc::kInvalidArgument, {"out_rows=-2"},
               "out_rows < 0");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(op.probe(prev), -1) << "a failed send delivered something";
  MPI_Barrier(MPI_COMM_WORLD);
  // An empty message, then five rows received first into room for three.
  EXPECT_EQ(op.send(next, nullptr, 0), 1u);
  EXPECT_EQ(op.recv(prev, nullptr, 0), 0);
  Bytes five = message(DType::kFloat32, r, next, 11);
  five.resize(5 * row);
  EXPECT_EQ(op.send(next, five.data(), 5), 2u);
  int64_t seen = -1;
  while ((seen = op.probe(prev)) < 0) std::this_thread::yield();
  EXPECT_EQ(seen, 5);
  Bytes out(kMaxM * row, kPoison);
  expect_error([&] { op.recv(prev, out.data(), 3); }, Errc::kInvalidArgument,
               {"message 2", "m=5", "out_rows=3", "stays queued"}, "recv into room for 3 rows");
  EXPECT_TRUE(expect_untouched(out, 0, "recv into too small a buffer"));
  EXPECT_EQ(op.probe(prev), 5);
  EXPECT_EQ(op.recv(prev, out.data(), kMaxM), 5);
  Bytes want = message(DType::kFloat32, prev, r, 11);
  want.resize(5 * row);
  EXPECT_EQ(mem_cmp(out.data(), want.data(), want.size()), 0) << "the queued message changed";
  EXPECT_EQ(op.probe(prev), -1);
  op.close();
}

// Every rank must agree on the shape and list its peers symmetrically; the context stays usable.
TEST_F(AsyncSendRecvErrors, CreateChecks) {
  const int W = world_size(), r = world_rank();
  Context ctx(MPI_COMM_WORLD, test_options());
  auto bad = [&](AsyncSendRecvOptions o, std::vector<std::string> needles, const char* what) {
    expect_error([&] { AsyncSendRecv op(ctx, o); }, Errc::kInvalidArgument, needles, what);
  };
  AsyncSendRecvOptions o = options({1, DType::kFloat32});
  o.num_slots = r == W - 1 ? 2 : 1;
  if (W > 1) bad(o, {"num_slots"}, "num_slots differ");
  o = options({0, DType::kFloat32});
  bad(o, {"num_slots=0"}, "num_slots 0");
  o = options({1, DType::kFloat32}, std::vector<int>{r == 0 ? W : (r + 1) % W});
  bad(o, {"outside"}, "a peer out of range");
  o = options({1, DType::kFloat32}, std::vector<int>{r});
  bad(o, {"itself"}, "self as peer");
  if (W >= 3) {
    // Rank 0 lists rank 1; nobody lists rank 0.
    o = options({1, DType::kFloat32}, r == 0 ? std::vector<int>{1} : std::vector<int>{});
    bad(o, {"not symmetric", "rank 0 lists rank 1"}, "an asymmetric list");
  }
  AsyncSendRecv ok(ctx, options({1, DType::kFloat32}));
  EXPECT_EQ(ok.peers().size(), W == 1 ? 0u : W == 2 ? 1u : 2u);
  ok.close();
}

// A receive with no sender: kTimeout within the timeout plus a little, naming the peer, the
// message and the counter; that pair is broken, the other direction goes on.
TEST_F(AsyncSendRecvErrors, RecvWithoutSenderTimesOut) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "needs a peer (W = 1)";
  const double timeout_s = 1.0;
  Context ctx(MPI_COMM_WORLD, test_options(timeout_s));
  AsyncSendRecv op(ctx, options({2, DType::kFloat32}));
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  Bytes out(kMaxM * row_bytes(DType::kFloat32));
  if (r == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { op.recv(prev, out.data(), kMaxM); }, Errc::kTimeout,
                 {"recv from rank " + std::to_string(prev), "message 1", "observed", "= 0"},
                 "recv without a sender");
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(took, timeout_s * 0.95);
    EXPECT_LE(took, timeout_s + 1.0);
    expect_error([&] { op.recv(prev, out.data(), kMaxM); }, Errc::kInvalidUsage, {"failed earlier"},
                 "recv on the broken pair");
    expect_error([&] { (void)op.probe(prev); }, Errc::kInvalidUsage, {"failed earlier"}, "probe");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Bytes data = message(DType::kFloat32, r, next, 1);
  if (r == 0) op.send(next, data.data(), rows_of(r, next, 1));
  if (r == 1) {
    const int64_t m = op.recv(0, out.data(), kMaxM);
    Bytes want = message(DType::kFloat32, 0, 1, 1);
    ASSERT_EQ(m, rows_of(0, 1, 1));
    EXPECT_EQ(mem_cmp(out.data(), want.data(), want.size()), 0);
  }
  op.close();
}

// isend's data is not read after send_wait: the buffer is poisoned right after and refilled with
// the next message; the receiver must get every original.
TEST_F(AsyncSendRecvErrors, IsendDataNotReadAfterSendWait) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "needs a peer (W = 1)";
  Context ctx(MPI_COMM_WORLD, test_options());
  const int slots = 3, N = 40;
  AsyncSendRecv op(ctx, options({slots, DType::kFloat32}));
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  const std::size_t row = row_bytes(DType::kFloat32);
  Bytes buf(kMaxM * row), out(kMaxM * row);
  for (int q = 0; q < N; ++q) {
    Bytes m = message(DType::kFloat32, r, next, q);
    mem_copy(buf.data(), m.data(), m.size());
    const uint64_t seq = op.isend(next, buf.data(), rows_of(r, next, q));
    op.send_wait(next, seq);
    EXPECT_TRUE(op.send_test(next, seq));
    std::memset(buf.data(), 0xA5, buf.size());
    const int64_t got = op.recv(prev, out.data(), kMaxM);
    Bytes want = message(DType::kFloat32, prev, r, q);
    ASSERT_EQ(got, rows_of(prev, r, q));
    EXPECT_EQ(mem_cmp(out.data(), want.data(), want.size()), 0) << "message " << q + 1;
  }
  op.close();
}

// destroy is collective and bounded: a rank that does not take part is named in the others'
// kTimeout within the timeout plus a little (the context is then broken: its communicator may
// hold an unmatched check-in), and that rank's own destroy, once the others are gone, too.
TEST_F(AsyncSendRecvErrors, DestroyWithoutPeerTimesOut) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "needs a peer (W = 1)";
  const double timeout_s = 1.0;
  Context ctx(MPI_COMM_WORLD, test_options(timeout_s));
  AsyncSendRecv op(ctx, options({1, DType::kFloat32}));
  if (r != W - 1) {
    const auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { op.close(); }, Errc::kTimeout,
                 {"async_send_recv destroy", std::to_string(W - 1), "did not take part"},
                 "destroy without the last rank");
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LE(took, timeout_s + 1.0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == W - 1) {
    // The others' tokens are already here, so the late destroy may succeed; either way it ends
    // within the timeout.
    const auto t0 = std::chrono::steady_clock::now();
    try {
      op.close();
    } catch (const Error& e) {
      EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(Errc::kTimeout)) << e.what();
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LE(took, timeout_s + 1.0);
  } else {
    expect_error(
        [&] {
          AsyncSendRecv again(ctx, options({1, DType::kFloat32}));
        },
        Errc::kInvalidUsage, {"destroy failed"}, "create on the broken context");
  }
}

// One thread at a time: a second thread entering the op while a recv waits gets INVALID_USAGE;
// the waiting recv goes on and gets its message.
TEST_F(AsyncSendRecvErrors, SecondThreadIsRefused) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "needs a peer (W = 1)";
  Context ctx(MPI_COMM_WORLD, test_options());
  AsyncSendRecv op(ctx, options({1, DType::kFloat32}));
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  Bytes out(kMaxM * row_bytes(DType::kFloat32));
  if (r == 0) {
    std::atomic<bool> started{false};
    int64_t got = -1;
    std::thread waiter([&] {
      started = true;
      got = op.recv(prev, out.data(), kMaxM);
    });
    while (!started) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    expect_error([&] { (void)op.probe(prev); }, Errc::kInvalidUsage, {"another thread"},
                 "probe from a second thread");
    MPI_Barrier(MPI_COMM_WORLD);
    waiter.join();
    EXPECT_EQ(got, rows_of(prev, 0, 2));
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    if (next == 0) {
      Bytes mine = message(DType::kFloat32, r, 0, 2);
      op.send(0, mine.data(), rows_of(r, 0, 2));
    }
  }
  op.close();
}

// Messages far above MPI's eager sizes (up to 512 KiB), isend then recv around the ring: across
// hosts each needs the sender's progress while it waits for its own receive.
TEST_F(AsyncSendRecvErrors, RingLargeMessages) {
  const int W = world_size(), r = world_rank();
  if (W < 2) GTEST_SKIP() << "a ring needs two ranks (W = 1)";
  Context ctx(MPI_COMM_WORLD, test_options());
  AsyncSendRecvOptions o;
  o.max_m = 512;
  o.n = 256;
  o.num_slots = 2;
  AsyncSendRecv op(ctx, o);
  const int next = (r + 1) % W, prev = (r - 1 + W) % W;
  const std::size_t row = 256 * sizeof(float);
  for (int q = 0; q < 10; ++q) {
    const int64_t m = 512 - 37 * q, pm = m;  // every rank sends the same sizes
    Bytes mine =
        random_tensor(DType::kFloat32, static_cast<std::size_t>(m) * 256, seed_of(r, q, 5));
    Bytes got(512 * row), ref(512 * row);
    const uint64_t seq = op.isend(next, mine.data(), m);
    ASSERT_EQ(op.recv(prev, got.data(), 512), pm) << "message " << q + 1;
    op.send_wait(next, seq);
    MPI_Sendrecv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, next, q, ref.data(),
                 static_cast<int>(ref.size()), MPI_BYTE, prev, q, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    EXPECT_EQ(mem_cmp(got.data(), ref.data(), static_cast<std::size_t>(pm) * row), 0)
        << "rank " << r << ": message " << q + 1 << " from rank " << prev << " differs";
  }
  op.close();
}

}  // namespace
}  // namespace fluxcpp::test
