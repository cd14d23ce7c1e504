// ReduceScatter against references computed here: closed-form sums of small integers (exact in
// any order), and the fixed summation order (within a host by local rank counting down from the
// reducing rank's, its own share last, then across hosts by host index) replayed on the blocks
// gathered with MPI_Alltoall, bit for bit; MPI's own MPI_Reduce_scatter_block (order
// unspecified) only as a sanity check within a tolerance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// ---- element access --------------------------------------------------------------------------

// Stores v (exactly representable in t, or rounded once: RNE) as element i.
void store(unsigned char* p, DType t, std::size_t i, double v) {
  switch (t) {
    case DType::kFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      break;
    }
    case DType::kFloat64: std::memcpy(p + 8 * i, &v, 8); break;
    case DType::kBFloat16: {
      uint16_t b = float_to_bf16(static_cast<float>(v));
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
  }
}

// ---- deterministic data ----------------------------------------------------------------------

// Small integers in [-8, 8]: exact in every dtype, and so are their sums over <= 32 ranks.
int64_t pattern(int s, int64_t row, int64_t col, int call) {
  return (static_cast<int64_t>(s) * 7 + row * 3 + col + static_cast<int64_t>(call) * 5) % 17 - 8;
}

// Rank r's input [m, n] of call `call`.
void fill_pattern(Bytes& in, DType t, int64_t m, int64_t n, int r, int call) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      store(in.data(), t, static_cast<std::size_t>(i * n + j),
            static_cast<double>(pattern(r, i, j, call)));
}

// Rank r's expected output [rows, n] for the pattern: rows [r*rows, (r+1)*rows) summed over ranks.
Bytes expected_pattern(DType t, int64_t rows, int64_t n, int r, int W, int call) {
  Bytes out(static_cast<std::size_t>(rows * n) * dtype_size(t));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int s = 0; s < W; ++s) sum += pattern(s, r * rows + i, j, call);
      store(out.data(), t, static_cast<std::size_t>(i * n + j), static_cast<double>(sum));
    }
  return out;
}

// Random values in [-1, 1] with full mantissas and spread exponents, so that the summation order
// shows in the rounding: f32 24 bits scaled by 2^-(0..15), f64 53 bits scaled by 2^-(0..31),
// bf16 made as bits (random sign, exponent 2^-1..2^-40, 7 random mantissa bits).
void fill_random(Bytes& in, DType t, std::size_t count, uint64_t seed) {
  uint64_t s = seed;
  for (std::size_t i = 0; i < count; ++i) {
    const uint64_t r = splitmix(s);
    switch (t) {
      case DType::kFloat32: {
        float v = std::ldexp(static_cast<float>(static_cast<int64_t>(r >> 40) - (int64_t{1} << 23)),
                             -23 - static_cast<int>(r & 15u));
        std::memcpy(in.data() + 4 * i, &v, 4);
        break;
      }
      case DType::kFloat64: {
        double v =
            std::ldexp(static_cast<double>(static_cast<int64_t>(r >> 11) - (int64_t{1} << 52)),
                       -52 - static_cast<int>(r & 31u));
        std::memcpy(in.data() + 8 * i, &v, 8);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t v = random_bf16(r, 40);
        std::memcpy(in.data() + 2 * i, &v, 2);
        break;
      }
    }
  }
}

// ---- the ordered reference -------------------------------------------------------------------

// The summation order: hosts[h] = the world ranks of host h by local rank. Taken from the
// context (gathered), and checked against the forced layout when FLUXCPP_TEST_RANKS_PER_NODE
// is set.
struct Layout {
  std::vector<std::vector<int>> hosts;
  int me = 0;  // this rank's local rank: it reduces its own block
};

Layout gather_layout(const Context& ctx) {
  const int W = ctx.world_size();
  int mine[2] = {ctx.host_id(), ctx.host_rank()};
  std::vector<int> all(2 * static_cast<std::size_t>(W));
  MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, MPI_COMM_WORLD);
  Layout l;
  l.me = ctx.host_rank();
  l.hosts.resize(static_cast<std::size_t>(ctx.num_hosts()));
  for (int s = 0; s < W; ++s) {
    const int h = all[2 * s], lr = all[2 * s + 1];
    EXPECT_TRUE(h >= 0 && h < ctx.num_hosts()) << "rank " << s << " host " << h;
    if (h < 0 || h >= ctx.num_hosts()) continue;
    auto& host = l.hosts[static_cast<std::size_t>(h)];
    if (static_cast<int>(host.size()) <= lr) host.resize(static_cast<std::size_t>(lr) + 1, -1);
    host[static_cast<std::size_t>(lr)] = s;
  }
  for (std::size_t h = 0; h < l.hosts.size(); ++h)
    for (int s : l.hosts[h]) EXPECT_GE(s, 0) << "host " << h << " lacks a local rank";
  const int L = test_ranks_per_host();
  if (L > 0) {
    for (int s = 0; s < W; ++s)
      EXPECT_EQ(all[2 * s], s / L) << "forced layout: rank " << s << " should be on host " << s / L;
  }
  return l;
}

// Sum over ranks of x(s) in the fixed order, in Acc: each host's sum taken by the rank with our
// local rank `me`, over local ranks me-1, me-2, ..., me+1 (mod L) and then me itself; then the
// host sums left to right by host.
template <typename Acc, typename F>
Acc ordered_sum(const Layout& l, F&& x) {
  Acc total = 0;
  bool first = true;
  for (const auto& host : l.hosts) {
    if (host.empty()) continue;
    const int L = static_cast<int>(host.size());
    auto local = [&](int i) { return i < L - 1 ? (l.me + L - 1 - i) % L : l.me; };
    Acc hs = x(host[static_cast<std::size_t>(local(0))]);
    for (int i = 1; i < L; ++i) hs = hs + x(host[static_cast<std::size_t>(local(i))]);
    total = first ? hs : total + hs;
    first = false;
  }
  return total;
}

// blocks: W blocks of `count` elements, block s = rank s's rows of this rank's output. Returns the
// output in dtype t: f32 and bf16 accumulate in f32 (bf16 rounded once), f64 in f64.
Bytes ordered_reference(DType t, const Bytes& blocks, std::size_t count, const Layout& l) {
  const std::size_t esz = dtype_size(t);
  Bytes out(count * esz);
  for (std::size_t i = 0; i < count; ++i) {
    auto at = [&](int s) {
      return load(blocks.data() + static_cast<std::size_t>(s) * count * esz, t, i);
    };
    if (t == DType::kFloat64) {
      store(out.data(), t, i, ordered_sum<double>(l, at));
    } else {
      const float v = ordered_sum<float>(l, [&](int s) { return static_cast<float>(at(s)); });
      store(out.data(), t, i, v);  // exact for f32; the one RNE rounding for bf16
    }
  }
  return out;
}

// Every rank's rows of this rank's output block: MPI_Alltoall of the row blocks.
Bytes exchange_blocks(const Bytes& in, std::size_t block_bytes) {
  const int W = world_size();
  Bytes blocks(block_bytes * static_cast<std::size_t>(W));
  if (block_bytes == 0) return blocks;
  MPI_Alltoall(in.data(), static_cast<int>(block_bytes), MPI_BYTE, blocks.data(),
               static_cast<int>(block_bytes), MPI_BYTE, MPI_COMM_WORLD);
  return blocks;
}

// ---- checks ------------------------------------------------------------------------------------

// op.forward, failures reported instead of thrown. Returns true if it returned normally.
bool forward(ReduceScatter& op, const void* in, int64_t m, void* out, const std::string& what) {
  try {
    op.forward(in, m, out);
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": forward threw: " << e.what();
    return false;
  }
}

// Sanity against MPI_Reduce_scatter_block (any order): |got - mpi| <= W * 2^-22 * Σ|x_s| (f32
// accumulation; 2^-51 for f64) + for bf16 the one rounding, 2^-8 * |mpi|. Collective.
void expect_close_to_mpi(DType t, const Bytes& in, std::size_t count, const Bytes& blocks,
                         const Bytes& got, const std::string& what) {
  const int W = world_size();
  const std::size_t total = count * static_cast<std::size_t>(W);
  std::vector<double> mpi(count, 0.0);
  if (t == DType::kFloat64) {
    std::vector<double> send(total);
    std::memcpy(send.data(), in.data(), total * 8);
    MPI_Reduce_scatter_block(send.data(), mpi.data(), static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                             MPI_COMM_WORLD);
  } else {
    std::vector<float> send(total), recv(count);
    for (std::size_t i = 0; i < total; ++i) send[i] = static_cast<float>(load(in.data(), t, i));
    MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD);
    for (std::size_t i = 0; i < count; ++i) mpi[i] = recv[i];
  }
  const double eps = std::ldexp(1.0, t == DType::kFloat64 ? -51 : -22);
  const std::size_t esz = dtype_size(t);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double sum_abs = 0.0;
    for (int s = 0; s < W; ++s)
      sum_abs += std::fabs(load(blocks.data() + static_cast<std::size_t>(s) * count * esz, t, i));
    double tol = static_cast<double>(W) * eps * sum_abs + 1e-300;
    if (t == DType::kBFloat16) tol += std::ldexp(std::fabs(mpi[i]) + tol, -8);
    const double g = load(got.data(), t, i);
    if (std::fabs(g - mpi[i]) <= tol) continue;  // NaN fails here too
    if (bad < 4)
      ADD_FAILURE() << std::setprecision(17) << what << ": rank " << world_rank() << " element "
                    << i << ": MPI_Reduce_scatter_block gives " << mpi[i] << " ± " << tol
                    << ", got " << g;
    ++bad;
  }
  if (bad > 4)
    ADD_FAILURE() << what << ": rank " << world_rank() << ": " << bad << " of " << count
                  << " elements far from MPI_Reduce_scatter_block";
}

ReduceScatterOptions options(int64_t max_m, int64_t n, DType t) {
  ReduceScatterOptions o;
  o.max_m = max_m;
  o.n = n;
  o.dtype = t;
  return o;
}

// One forward of the integer pattern, checked bit for bit against the closed form (and nothing
// written beyond the block; m == 0 writes nothing). Collective.
bool check_pattern(ReduceScatter& op, DType t, int64_t rows, int64_t n, int call,
                   const std::string& what) {
  const int W = world_size(), r = world_rank();
  const int64_t m = rows * W;
  const std::size_t count = static_cast<std::size_t>(rows * n);
  Bytes in(static_cast<std::size_t>(m * n) * dtype_size(t));
  fill_pattern(in, t, m, n, r, call);
  Bytes out = poisoned_output(t, count);
  if (!forward(op, in.empty() ? nullptr : in.data(), m, out.data(), what)) return false;
  bool ok = expect_same_bits(expected_pattern(t, rows, n, r, W, call), out, t, n, what);
  return expect_untouched(out, count * dtype_size(t), what) && ok;
}

// One forward of `in` ([rows*W, n]), checked bit for bit against the ordered reference and
// loosely against MPI_Reduce_scatter_block. Returns the output block. Collective.
Bytes check_ordered(ReduceScatter& op, DType t, const Bytes& in, int64_t rows, int64_t n,
                    const Layout& l, const std::string& what) {
  const int W = world_size();
  const std::size_t count = static_cast<std::size_t>(rows * n), esz = dtype_size(t);
  Bytes out = poisoned_output(t, count);
  forward(op, in.empty() ? nullptr : in.data(), rows * W, out.data(), what);
  Bytes blocks = exchange_blocks(in, count * esz);
  expect_same_bits(ordered_reference(t, blocks, count, l), out, t, n,
                   what + " (ordered reference)");
  expect_untouched(out, count * esz, what);
  if (count > 0) expect_close_to_mpi(t, in, count, blocks, out, what);
  out.resize(count * esz);
  return out;
}

// ---- 1 + 2. shapes: exact integer patterns, and random data against the ordered reference ----

struct Shape {
  DType dtype;
  int64_t rows_per_rank;
  int64_t n;
};

std::string shape_name(const Shape& s) {
  return std::string(dtype_name(s.dtype)) + "_rows" + std::to_string(s.rows_per_rank) + "_n" +
         std::to_string(s.n);
}

void PrintTo(const Shape& s, std::ostream* os) {
  *os << shape_name(s);
}

class ReduceScatterTest : public MpiTest, public ::testing::WithParamInterface<Shape> {};

// One op; a pattern call, a random call (ordered reference + MPI sanity), another pattern call
// and another random call, on reused buffers with new contents.
TEST_P(ReduceScatterTest, ExactPatternsAndOrderedReference) {
  const Shape s = GetParam();
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const Layout l = gather_layout(ctx);
  const int64_t m = s.rows_per_rank * W;
  ReduceScatter op(ctx, options(std::max<int64_t>(m, W), s.n, s.dtype));
  EXPECT_EQ(op.options().n, s.n);
  EXPECT_EQ(op.options().max_m, std::max<int64_t>(m, W));
  EXPECT_EQ(static_cast<int>(op.options().dtype), static_cast<int>(s.dtype));
  Bytes in(static_cast<std::size_t>(m * s.n) * dtype_size(s.dtype));
  for (int call = 0; call < 4; ++call) {
    const std::string what = shape_name(s) + " W=" + std::to_string(W) + " call " +
                             std::to_string(call) + (call % 2 == 0 ? " pattern" : " random");
    if (call % 2 == 0) {
      check_pattern(op, s.dtype, s.rows_per_rank, s.n, call, what);
    } else {
      fill_random(in, s.dtype, static_cast<std::size_t>(m * s.n), seed_of(ctx.rank(), call, 1));
      check_ordered(op, s.dtype, in, s.rows_per_rank, s.n, l, what);
    }
    if (any_rank(HasFailure())) break;  // uniform: every rank stops together
  }
}

std::vector<Shape> shapes() {
  std::vector<Shape> v;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBFloat16})
    for (int64_t rows : {0, 1, 7, 300})
      for (int64_t n : {1, 3, 1000}) v.push_back({d, rows, n});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReduceScatterTest, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return shape_name(i.param);
                         });

class ReduceScatterOrder : public MpiTest {};

// bf16 data chosen so that the exact (f32) sums often fall halfway between two bf16 values: the
// one rounding must be to nearest even, and rounding any partial sum to bf16 (or rounding twice)
// shows. Rank 0 holds values near 1; the others hold 2^-8-ish values.
TEST_F(ReduceScatterOrder, Bf16RoundsOnceToNearestEven) {
  // The test's own helper first.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie, down to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie, up to even
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);

  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const Layout l = gather_layout(ctx);
  const int64_t rows = 5, n = 96, m = rows * W;
  ReduceScatter op(ctx, options(m, n, DType::kBFloat16));
  const double base[] = {1.0, -1.0, 1.0078125, 3.0, 128.0, -2.0};
  const double small[] = {0x1p-8, 0x1p-9, 0x3p-9, -0x1p-8, 0x1p-10, -0x3p-9, 0x1p-7};
  Bytes in(static_cast<std::size_t>(m * n) * 2);
  for (int64_t i = 0; i < m * n; ++i) {
    const double v = r == 0 ? base[i % 6] : small[(i / 6 + r * 3) % 7] * (i % 6 == 4 ? 128 : 1);
    store(in.data(), DType::kBFloat16, static_cast<std::size_t>(i), v);
    EXPECT_EQ(load(in.data(), DType::kBFloat16, static_cast<std::size_t>(i)), v);
  }
  check_ordered(op, DType::kBFloat16, in, rows, n, l, "bf16 ties W=" + std::to_string(W));
  if (W == 2) {
    // Spelled out: 1 + 2^-8 is a tie and goes down to 1.0 (0x3F80) on element (0, 0) of rank 0.
    Bytes out = poisoned_output(DType::kBFloat16, static_cast<std::size_t>(rows * n));
    Bytes two(in.size());
    for (int64_t i = 0; i < m * n; ++i)
      store(two.data(), DType::kBFloat16, static_cast<std::size_t>(i), r == 0 ? 1.0 : 0x1p-8);
    forward(op, two.data(), m, out.data(), "bf16 1 + 2^-8");
    if (r == 0) {
      EXPECT_EQ(hex_of(out.data(), DType::kBFloat16, 0), "0x3f80");
    }
  }
}

// Values of very different magnitudes in f32 and f64: the result depends on the order, so only
// the documented order passes (W >= 3, or W == 4 with two hosts, shows a difference).
TEST_F(ReduceScatterOrder, CancellationFollowsTheFixedOrder) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const Layout l = gather_layout(ctx);
  const int64_t rows = 4, n = 64, m = rows * W;
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    ReduceScatter op(ctx, options(m, n, t));
    const int bits = t == DType::kFloat32 ? 24 : 53;
    Bytes in(static_cast<std::size_t>(m * n) * dtype_size(t));
    for (int64_t i = 0; i < m * n; ++i) {
      // Rank patterns like {1, 2^-bits, -1, 2^-bits}: (1 + tiny) - 1 + tiny differs from
      // (1 + tiny) + (-1 + tiny).
      const int k = static_cast<int>((i + r) % 4);
      double v = k == 0 ? 1.0 : k == 2 ? -1.0 : std::ldexp(1.0 + (i % 3), -bits);
      if (i % 5 == 0) v = -v;
      store(in.data(), t, static_cast<std::size_t>(i), v);
    }
    check_ordered(op, t, in, rows, n, l,
                  std::string("cancellation ") + dtype_name(t) + " W=" + std::to_string(W));
    if (any_rank(HasFailure())) return;  // uniform
  }
}

// ---- 3. determinism ----------------------------------------------------------------------------

class ReduceScatterDeterminism : public MpiTest {};

// The same forward twice gives the same bits; a second context with two compute and two comm
// threads gives the same bits again (and all of them match the ordered reference).
TEST_F(ReduceScatterDeterminism, RepeatsAndOtherThreadCounts) {
  Context ctx(MPI_COMM_WORLD, test_options());
  ContextOptions o2 = test_options();
  o2.compute_threads = 2;
  o2.comm_threads = 2;
  Context ctx2(MPI_COMM_WORLD, o2);
  const int W = ctx.world_size(), r = ctx.rank();
  const Layout l = gather_layout(ctx);
  const int64_t rows = 300, n = 257, m = rows * W;
  int call = 0;
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    const std::string tag = std::string(dtype_name(t)) + " W=" + std::to_string(W);
    ReduceScatter op(ctx, options(m, n, t));
    ReduceScatter op2(ctx2, options(m, n, t));
    const std::size_t count = static_cast<std::size_t>(rows * n), esz = dtype_size(t);
    Bytes in(static_cast<std::size_t>(m * n) * esz);
    fill_random(in, t, static_cast<std::size_t>(m * n), seed_of(r, call++, 2));
    Bytes first = check_ordered(op, t, in, rows, n, l, tag + " first");
    Bytes again = poisoned_output(t, count);
    forward(op, in.data(), m, again.data(), tag + " again");
    expect_same_bits(first, again, t, n, tag + " second forward on the same op");
    Bytes other = poisoned_output(t, count);
    forward(op2, in.data(), m, other.data(), tag + " threads=2");
    expect_same_bits(first, other, t, n, tag + " context with 2 compute + 2 comm threads");
    // Interleaved with other data in between: still the same bits.
    Bytes noise(in.size());
    fill_random(noise, t, static_cast<std::size_t>(m * n), seed_of(r, call++, 3));
    Bytes scratch = poisoned_output(t, count);
    forward(op2, noise.data(), m, scratch.data(), tag + " noise");
    Bytes third = poisoned_output(t, count);
    forward(op2, in.data(), m, third.data(), tag + " threads=2 again");
    expect_same_bits(first, third, t, n, tag + " threads=2 after other data");
    if (any_rank(HasFailure())) return;  // uniform
  }
}

// ---- 4. many consecutive calls -------------------------------------------------------------

class ReduceScatterCalls : public MpiTest {};

// 200 forwards on one op with new data every call and changing m (including 0), exact integer
// patterns; a second op (bf16) on the same context every fifth call. A stale row, an early read
// or a reused partial sum shows up as a mismatch.
TEST_F(ReduceScatterCalls, TwoHundredCallsWithChangingDataAndM) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  const int64_t max_rows = 9, n = 131;
  ReduceScatter op(ctx, options(max_rows * W, n, DType::kFloat32));
  ReduceScatter side(ctx, options(max_rows * W, n, DType::kBFloat16));
  const int64_t rows_cycle[] = {9, 1, 0, 4, 9, 2, 7, 0, 3};
  for (int call = 0; call < 200; ++call) {
    const int64_t rows = rows_cycle[call % 9];
    const std::string what = "f32 call " + std::to_string(call) + " m=" + std::to_string(rows * W);
    check_pattern(op, DType::kFloat32, rows, n, call, what);
    if (call % 5 == 4)
      check_pattern(side, DType::kBFloat16, rows_cycle[(call + 3) % 9], n, call + 1000,
                    "bf16 side op call " + std::to_string(call));
    if (any_rank(HasFailure())) break;  // uniform
  }
}

// ---- 5. bad inputs ---------------------------------------------------------------------------

class ReduceScatterBadInput : public MpiTest {};

TEST_F(ReduceScatterBadInput, ForwardErrorsReachEveryRankAndOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const int64_t rows = 8, n = 16;
  const std::vector<std::string> rs = {"reduce_scatter"};
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const std::string tag = dtype_name(t);
    ReduceScatter op(ctx, options(rows * W, n, t));
    // Room for more rows than max_m on every buffer: errors must come from validation alone.
    Bytes in(static_cast<std::size_t>(4 * rows * W * n) * dtype_size(t), 0);
    Bytes out(static_cast<std::size_t>(4 * rows * n) * dtype_size(t), kPoison);
    void* o = out.data();
    const void* i = in.data();
    if (W > 1)
      expect_error([&] { op.forward(i, W + 1, o); }, Errc::kInvalidArgument, rs,
                   tag + " m % W != 0");
    expect_error([&] { op.forward(i, (rows + 1) * W, o); }, Errc::kInvalidArgument, rs,
                 tag + " m > max_m");
    expect_error([&] { op.forward(i, 2 * rows * W, o); }, Errc::kInvalidArgument, rs,
                 tag + " m = 2 max_m");
    expect_error([&] { op.forward(i, -W, o); }, Errc::kInvalidArgument, rs, tag + " m < 0");
    expect_error([&] { op.forward(r == W - 1 ? nullptr : i, W, o); }, Errc::kInvalidArgument, rs,
                 tag + " NULL input on the last rank");
    expect_error([&] { op.forward(i, W, r == 0 ? nullptr : o); }, Errc::kInvalidArgument, rs,
                 tag + " NULL output on rank 0");
    expect_error([&] { op.forward(nullptr, rows * W, nullptr); }, Errc::kInvalidArgument, rs,
                 tag + " NULL everywhere");
    if (W > 1) {
      expect_error([&] { op.forward(i, r == W - 1 ? 2 * W : W, o); }, Errc::kInvalidArgument, rs,
                   tag + " ranks pass different m");
      // One rank over max_m, the others fine.
      expect_error([&] { op.forward(i, r == 0 ? (rows + 1) * W : rows * W, o); },
                   Errc::kInvalidArgument, rs, tag + " m > max_m on rank 0 only");
    }
    // m == 0 with NULL pointers is a no-op.
    expect_no_throw([&] { op.forward(nullptr, 0, nullptr); }, tag + " m == 0");
    // Still usable after all of that, twice, at the full and a small size.
    check_pattern(op, t, rows, n, 1, tag + " good forward after errors");
    check_pattern(op, t, 1, n, 2, tag + " second good forward after errors");
    if (any_rank(HasFailure())) return;  // uniform
  }
}

TEST_F(ReduceScatterBadInput, CreateErrorsReachEveryRank) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  const std::vector<std::string> rs = {"reduce_scatter"};
  auto create = [&](ReduceScatterOptions o) { ReduceScatter op(ctx, o); };
  const ReduceScatterOptions good = options(4 * W, 24, DType::kFloat32);
  if (W > 1) {
    ReduceScatterOptions o = good;
    if (r == W - 1) o.n = 25;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "n differs on the last rank");
    o = good;
    if (r == 0) o.max_m = 8 * W;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "max_m differs on rank 0");
    o = good;
    if (r == W - 1) o.dtype = DType::kFloat64;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "dtype differs on the last rank");
    o = good;
    if (r == 0) o.dtype = DType::kBFloat16;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "dtype differs on rank 0");
  }
  {
    ReduceScatterOptions o = good;
    o.n = 0;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "n = 0");
    o.n = -3;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "n < 0");
    o = good;
    if (r == 0) o.n = 0;
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "n = 0 on rank 0 only");
    o = good;
    o.dtype = static_cast<DType>(7);
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "invalid dtype");
    o = good;
    if (r == W - 1) o.dtype = static_cast<DType>(-1);
    expect_error([&] { create(o); }, Errc::kInvalidArgument, rs, "invalid dtype on the last rank");
  }
  if (any_rank(HasFailure())) return;  // uniform
  // The context is still fine: a good op works.
  ReduceScatter op(ctx, good);
  check_pattern(op, DType::kFloat32, 4, 24, 3, "good op after create errors");
}

// Moving an op keeps it usable; a moved-from op is not used.
TEST_F(ReduceScatterBadInput, MovedOpStillWorks) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size();
  ReduceScatter a(ctx, options(6 * W, 10, DType::kFloat64));
  check_pattern(a, DType::kFloat64, 6, 10, 0, "before move");
  ReduceScatter b(std::move(a));
  check_pattern(b, DType::kFloat64, 3, 10, 1, "after move construction");
  ReduceScatter c(ctx, options(W, 2, DType::kFloat32));
  c = std::move(b);
  check_pattern(c, DType::kFloat64, 6, 10, 2, "after move assignment");
}

// ---- 6. a large case ---------------------------------------------------------------------------

class ReduceScatterBig : public MpiTest {};

// 2048 rows per rank, n = 1024, f32: 8 MiB output block per rank, input [2048 W, 1024]. One
// exact pattern call and one random call against the ordered reference.
TEST_F(ReduceScatterBig, Rows2048N1024F32) {
  Context ctx(MPI_COMM_WORLD, test_options(60.0));
  const int W = ctx.world_size();
  const Layout l = gather_layout(ctx);
  const int64_t rows = 2048, n = 1024, m = rows * W;
  ReduceScatter op(ctx, options(m, n, DType::kFloat32));
  const std::string tag = "big f32 W=" + std::to_string(W);
  check_pattern(op, DType::kFloat32, rows, n, 0, tag + " pattern");
  if (any_rank(HasFailure())) return;  // uniform
  Bytes in(static_cast<std::size_t>(m * n) * 4);
  fill_random(in, DType::kFloat32, static_cast<std::size_t>(m * n), seed_of(ctx.rank(), 1, 4));
  check_ordered(op, DType::kFloat32, in, rows, n, l, tag + " random");
}

}  // namespace
}  // namespace fluxcpp::test
