// Zero-copy input (input_buffer() in include/fluxcpp/{all_gather,ag_gemm,all_to_all_single,
// a2a_gemm}.hpp) through one harness: the caller writes each call's input into the op's buffer
// and forwards from it. Results are compared bit for bit (values are multiples of 1/8, so every
// GEMM sum is exact) with MPI_Allgather / MPI_Alltoallv and, for the GEMM ops, the shared GEMM
// reference; misuse must be an error on every rank and leave the op usable.
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "gemm_reference.hpp"
#include "mpi_test.hpp"
#include "test_data.hpp"

namespace fluxcpp::test {
namespace {

// A multiple of 1/8 in [-1, 1], different by rank, call and element: exact in every dtype.
double input_value(int rank, int call, std::size_t i) {
  uint64_t s = seed_of(rank, call, 5) + i;
  return static_cast<double>(static_cast<int64_t>(splitmix(s) % 17) - 8) / 8.0;
}

// One call's shape: m for the row ops; this rank's splits for all_to_all_single.
struct Shape {
  int64_t m = 0;
  std::vector<int64_t> in_splits, out_splits;
};

// Row counts per rank (or per block) that the row ops cycle through: 0, both sides of the
// GEMM ops' gather threshold (rows <= n = 12) and of cma's 16 KiB block, and the maxima.
const int64_t kRowsCycle[] = {16, 1, 0, 13, 12, 5, 15, 2, 9};

// What the tests need of an op with zero-copy input.
class Harness {
 public:
  Harness(DType in, DType out, int64_t width)
      : in_(in), out_(out), width_(width), row_(static_cast<std::size_t>(width) * dtype_size(in)) {}
  virtual ~Harness() = default;
  virtual const char* name() const = 0;
  virtual void* input_buffer() = 0;
  virtual int64_t max_input_rows() const = 0;  // on this rank
  // The shape of `call` (the same on every rank where it must be); variant v of the maxima.
  virtual Shape shape(int call) const = 0;
  virtual Shape max_shape(int v) const = 0;
  virtual int64_t input_rows(const Shape& s) const = 0;
  virtual std::size_t output_bytes(const Shape& s) const = 0;
  // gathered_input / a2a_output; 0 for ops without one.
  virtual std::size_t extra_bytes(const Shape&) const { return 0; }
  virtual void forward(const void* input, const Shape& s, void* output, void* extra) = 0;
  // Collective: the expected output and extra of a call whose input on this rank is `input`.
  virtual std::pair<Bytes, Bytes> expected(const Bytes& input, const Shape& s) const = 0;

  std::size_t row_bytes() const { return row_; }
  DType in_dtype() const { return in_; }
  DType out_dtype() const { return out_; }
  int64_t width() const { return width_; }
  virtual int64_t out_width() const { return width_; }  // elements per output row
  Bytes input_of(const Shape& s, int call) const {
    std::vector<double> v(static_cast<std::size_t>(input_rows(s) * width_));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = input_value(world_rank(), call, i);
    return narrow(v, in_);
  }

 protected:
  DType in_, out_;
  int64_t width_;  // elements per input row
  std::size_t row_;
  const int W_ = world_size(), r_ = world_rank();
};

// The row ops: m = rows per rank (or per block) * W.
class RowHarness : public Harness {
 public:
  RowHarness(DType in, DType out, int64_t width, int64_t max_rows)
      : Harness(in, out, width), max_rows_(max_rows) {}
  Shape shape(int call) const override {
    return call % 25 == 0 ? max_shape(call) : Shape{kRowsCycle[call % 9] * W_, {}, {}};
  }
  Shape max_shape(int) const override { return {max_rows_ * W_, {}, {}}; }

 protected:
  int64_t max_rows_;
};

class AllGatherHarness : public RowHarness {
 public:
  AllGatherHarness(const Context& ctx, DType t, int64_t width = 256)
      : RowHarness(t, t, width, 16), op_(ctx, {max_rows_ * W_, width_, t}) {}
  const char* name() const override { return "all_gather"; }
  void* input_buffer() override { return op_.input_buffer(); }
  int64_t max_input_rows() const override { return max_rows_; }
  int64_t input_rows(const Shape& s) const override { return s.m / W_; }
  std::size_t output_bytes(const Shape& s) const override { return s.m * row_; }
  void forward(const void* input, const Shape& s, void* output, void*) override {
    op_.forward(input, s.m, output);
  }
  std::pair<Bytes, Bytes> expected(const Bytes& input, const Shape& s) const override {
    return {mpi_allgather(input, s.m / W_, row_), {}};
  }

 private:
  AllGather op_;
};

// The GEMM ops: k = 20 and weights in {-1, 0, 1} keep every sum a multiple of 1/8 below 32 in
// magnitude, exact in f32 and in bf16; n = 12 puts the gather threshold inside kRowsCycle.
class GemmHarness : public RowHarness {
 public:
  GemmHarness(DType in, DType out) : RowHarness(in, out, 20, 16), p_{in, out, 12, 20, false} {
    std::vector<double> w(static_cast<std::size_t>(p_.n * p_.k)), b(p_.n);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::fmod(input_value(r_, -1, i) * 8, 2);
    for (std::size_t j = 0; j < b.size(); ++j) b[j] = input_value(r_, -2, j);
    weight_ = narrow(w, in), bias_ = narrow(b, out);
  }
  std::size_t output_bytes(const Shape& s) const override {
    return static_cast<std::size_t>(s.m * p_.n) * dtype_size(out_);
  }
  std::size_t extra_bytes(const Shape& s) const override { return s.m * row_; }
  int64_t out_width() const override { return p_.n; }

 protected:
  // The GEMM of this rank's rows `a` (m of them), encoded in the output dtype.
  Bytes gemm(const Bytes& a, int64_t m) const {
    return narrow(reference(p_, m, a, weight_, &bias_).value, out_);
  }
  Problem p_;
  Bytes weight_, bias_;
};

class AgGemmHarness : public GemmHarness {
 public:
  AgGemmHarness(const Context& ctx, DType in, DType out)
      : GemmHarness(in, out), op_(ctx, {max_rows_ * W_, p_.n, p_.k, in, out}) {}
  const char* name() const override { return "ag_gemm"; }
  void* input_buffer() override { return op_.input_buffer(); }
  int64_t max_input_rows() const override { return max_rows_; }
  int64_t input_rows(const Shape& s) const override { return s.m / W_; }
  void forward(const void* input, const Shape& s, void* output, void* extra) override {
    op_.forward(input, s.m, weight_.data(), bias_.data(), output, extra);
  }
  std::pair<Bytes, Bytes> expected(const Bytes& input, const Shape& s) const override {
    Bytes gathered = mpi_allgather(input, s.m / W_, row_);
    return {gemm(gathered, s.m), gathered};
  }

 private:
  AgGemm op_;
};

class A2aGemmHarness : public GemmHarness {
 public:
  A2aGemmHarness(const Context& ctx, DType in, DType out)
      : GemmHarness(in, out), op_(ctx, {max_rows_ * W_, p_.n, p_.k, in, out}) {}
  const char* name() const override { return "a2a_gemm"; }
  void* input_buffer() override { return op_.input_buffer(); }
  int64_t max_input_rows() const override { return max_rows_ * W_; }
  int64_t input_rows(const Shape& s) const override { return s.m; }
  void forward(const void* input, const Shape& s, void* output, void* extra) override {
    op_.forward(input, s.m, weight_.data(), bias_.data(), output, extra);
  }
  std::pair<Bytes, Bytes> expected(const Bytes& input, const Shape& s) const override {
    const std::vector<int64_t> blocks(W_, s.m / W_);
    Bytes exchanged = mpi_alltoallv(input, blocks, blocks, row_);
    return {gemm(exchanged, s.m), exchanged};
  }

 private:
  A2aGemm op_;
};

class AllToAllSingleHarness : public Harness {
 public:
  AllToAllSingleHarness(const Context& ctx, DType t)
      : Harness(t, t, 256), op_(ctx, {kMaxRows, width_, t}) {}
  const char* name() const override { return "all_to_all_single"; }
  void* input_buffer() override { return op_.input_buffer(); }
  int64_t max_input_rows() const override { return kMaxRows; }
  // Mostly up to kMaxRows/W rows per pair (zeros included); every seventh call one rank sends
  // and receives nothing; every 25th call the maxima.
  Shape shape(int call) const override {
    if (call % 25 == 0) return max_shape(call / 25);
    auto rows = [&](int s, int t) -> int64_t {
      const int idle = call % W_;
      if (call % 7 == 5 && (s == idle || t == idle)) return 0;
      uint64_t h = seed_of(s, call, t);
      return static_cast<int64_t>(splitmix(h) % (kMaxRows / W_ + 1));
    };
    return from_matrix(rows);
  }
  // Circulant splits (rank s sends f[(t - s) mod W] rows to rank t), so every rank sends and
  // receives exactly kMaxRows: all to the next rank, all to itself, or spread.
  Shape max_shape(int v) const override {
    std::vector<int64_t> f(W_, 0);
    if (v % 3 == 0) f[1 % W_] = kMaxRows;
    if (v % 3 == 1) f[0] = kMaxRows;
    if (v % 3 == 2)
      for (int d = 0; d < W_; ++d) f[d] = kMaxRows / W_ + (d < kMaxRows % W_ ? 1 : 0);
    return from_matrix([&](int s, int t) { return f[(t - s + W_) % W_]; });
  }
  int64_t input_rows(const Shape& s) const override {
    int64_t n = 0;
    for (int64_t x : s.in_splits) n += x;
    return n;
  }
  std::size_t output_bytes(const Shape& s) const override {
    int64_t n = 0;
    for (int64_t x : s.out_splits) n += x;
    return n * row_;
  }
  void forward(const void* input, const Shape& s, void* output, void*) override {
    op_.forward(input, s.in_splits.data(), output, s.out_splits.data());
  }
  std::pair<Bytes, Bytes> expected(const Bytes& input, const Shape& s) const override {
    return {mpi_alltoallv(input, s.in_splits, s.out_splits, row_), {}};
  }

 private:
  static constexpr int64_t kMaxRows = 40;
  template <class F>
  Shape from_matrix(F rows) const {
    Shape s;
    for (int t = 0; t < W_; ++t) {
      s.in_splits.push_back(rows(r_, t));
      s.out_splits.push_back(rows(t, r_));
    }
    return s;
  }
  AllToAllSingle op_;
};

struct Case {
  const char* op;
  DType in, out;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.op << " " << dtype_name(c.in) << "->" << dtype_name(c.out);
}

std::unique_ptr<Harness> make(const Case& c, const Context& ctx) {
  const std::string op = c.op;
  if (op == "all_gather") return std::make_unique<AllGatherHarness>(ctx, c.in);
  // Rows of 16 KiB (f32) or 8 KiB (bf16): blocks on both sides of the 64 KiB that ride on the
  // handshake on one host, the staged and single-copy paths beside them on the same op.
  if (op == "all_gather_wide") return std::make_unique<AllGatherHarness>(ctx, c.in, 4096);
  if (op == "ag_gemm") return std::make_unique<AgGemmHarness>(ctx, c.in, c.out);
  if (op == "all_to_all_single") return std::make_unique<AllToAllSingleHarness>(ctx, c.in);
  return std::make_unique<A2aGemmHarness>(ctx, c.in, c.out);
}

// One call on this rank: its shape, its input and the expected outputs.
struct Planned {
  Shape shape;
  Bytes in, want, want_extra;
};

// Collective (the references come from MPI).
Planned plan(const Harness& h, const Shape& s, int call) {
  Planned p{s, h.input_of(s, call), {}, {}};
  std::tie(p.want, p.want_extra) = h.expected(p.in, s);
  return p;
}

// One forward of a planned call, checked bit for bit (outputs poisoned, guards untouched) unless
// !check. zero_copy: from input_buffer(), which must return `addr`; else from a private copy.
// Returns false if anything failed on this rank.
bool run_call(Harness& h, const Planned& p, bool zero_copy, bool with_extra, void* addr,
              const std::string& what, bool check = true) {
  Bytes out(h.output_bytes(p.shape) + 64, kPoison), extra(h.extra_bytes(p.shape) + 64, kPoison);
  const void* input = p.in.empty() ? nullptr : p.in.data();
  if (zero_copy) {
    void* b = h.input_buffer();
    EXPECT_EQ(b, addr) << what << ": rank " << world_rank() << ": the buffer moved";
    if (!p.in.empty()) std::memcpy(b, p.in.data(), p.in.size());
    input = b;
  }
  if (!expect_no_throw(
          [&] { h.forward(input, p.shape, out.data(), with_extra ? extra.data() : nullptr); },
          what + " forward"))
    return false;
  if (!check) return true;
  bool ok = expect_same_bits(p.want, out, h.out_dtype(), h.out_width(), what + " output") &&
            expect_untouched(out, p.want.size(), what + " output");
  if (with_extra)
    ok = expect_same_bits(p.want_extra, extra, h.in_dtype(), h.width(), what + " extra") &&
         expect_untouched(extra, p.want_extra.size(), what + " extra") && ok;
  return ok;
}

// plan() and run_call() in one: collective.
bool checked_call(Harness& h, const Shape& s, int call, bool zero_copy, bool with_extra, void* addr,
                  const std::string& what) {
  return run_call(h, plan(h, s, call), zero_copy, with_extra, addr, what);
}

// Which calls read from the buffer: runs of zero-copy calls, ordinary calls on every rank, and
// calls where some ranks use the buffer and others do not.
bool zero_copy_call(int call, int rank) {
  const int phase = call % 8;
  return phase < 4 || (phase > 4 && (rank + call) % 2 == 0);
}

class ZeroCopy : public MpiTest, public ::testing::WithParamInterface<Case> {};

// 200 calls with new values every call, varying shapes (maxima and nothing included), zero-copy
// and ordinary calls mixed on the same op, extra outputs every other call. The references are
// computed first, so that nothing but the op synchronises the ranks between calls: a rank
// rewrites its buffer as soon as input_buffer() lets it, while its peers may still be reading.
TEST_P(ZeroCopy, TwoHundredCallsExact) {
  Context ctx(MPI_COMM_WORLD, test_options());
  auto h = make(GetParam(), ctx);
  std::vector<Planned> plans;
  for (int call = 0; call < 200; ++call) plans.push_back(plan(*h, h->shape(call), call));
  void* const addr = h->input_buffer();
  bool ok = true;  // after a failure the calls go on (they are collective) unchecked
  for (int call = 0; call < 200; ++call) {
    const bool zc = zero_copy_call(call, ctx.rank());
    ok = run_call(*h, plans[call], zc, call % 2 == 0, addr,
                  std::string(h->name()) + " call " + std::to_string(call) +
                      (zc ? " zero-copy" : " ordinary"),
                  ok) &&
         ok;
  }
}

// The buffer keeps one address and holds the largest input of this rank: the maxima, written
// in full, forwarded from the buffer.
TEST_P(ZeroCopy, BufferHoldsTheLargestInputAtOneAddress) {
  Context ctx(MPI_COMM_WORLD, test_options());
  auto h = make(GetParam(), ctx);
  void* const addr = h->input_buffer();
  ASSERT_NE(addr, nullptr);
  for (int v = 0; v < 3; ++v) {
    const Shape s = h->max_shape(v);
    EXPECT_EQ(h->input_rows(s), h->max_input_rows());
    checked_call(*h, s, v, true, v != 1, addr,
                 std::string(h->name()) + " maxima " + std::to_string(v));
  }
  EXPECT_EQ(h->input_buffer(), addr);
}

enum class Misuse { kNoInputBuffer, kOrdinaryInBetween, kInsideSlot, kOutputIsBuffer, kExtra };
const std::pair<Misuse, const char*> kMisuses[] = {
    {Misuse::kNoInputBuffer, "input == buffer without input_buffer()"},
    {Misuse::kOrdinaryInBetween, "input == buffer, an ordinary forward since input_buffer()"},
    {Misuse::kInsideSlot, "input = buffer + one row"},
    {Misuse::kOutputIsBuffer, "output = buffer"},
    {Misuse::kExtra, "gathered_input / a2a_output = buffer"}};

// Each misuse by every rank, then by the last rank alone (the others call correctly): the same
// error on every rank, nothing written, and a correct call right after gives exact results.
TEST_P(ZeroCopy, MisuseIsAnErrorOnEveryRankAndTheOpStaysUsable) {
  Context ctx(MPI_COMM_WORLD, test_options());
  const int W = ctx.world_size(), r = ctx.rank();
  auto h = make(GetParam(), ctx);
  void* const addr = h->input_buffer();
  const Shape s = h->max_shape(2);
  const std::string op = h->name();
  int call = 0;
  for (const auto& [kind, misuse] : kMisuses)
    for (bool last_only : {false, true}) {
      if ((last_only && W == 1) || (kind == Misuse::kExtra && h->extra_bytes(s) == 0)) continue;
      const std::string what =
          op + ": " + misuse + (last_only ? " on the last rank" : " on every rank");
      const bool bad = !last_only || r == W - 1;
      checked_call(*h, s, call++, true, true, addr, what + ": the call before");
      if (kind == Misuse::kOrdinaryInBetween) {
        h->input_buffer();  // armed, but the ordinary forward below uses it up
        checked_call(*h, s, call++, false, false, addr, what + ": ordinary call");
      }
      const bool acquires = !bad || kind == Misuse::kInsideSlot ||
                            kind == Misuse::kOutputIsBuffer || kind == Misuse::kExtra;
      const Bytes in = h->input_of(s, call++);
      Bytes out(h->output_bytes(s), kPoison), extra(h->extra_bytes(s), kPoison);
      auto* b = static_cast<unsigned char*>(acquires ? h->input_buffer() : addr);
      if (acquires) std::memcpy(b, in.data(), in.size());
      const void* input = bad && kind == Misuse::kInsideSlot ? b + h->row_bytes() : b;
      void* output = bad && kind == Misuse::kOutputIsBuffer ? b : out.data();
      void* x = bad && kind == Misuse::kExtra ? b : extra.data();
      const bool usage = kind == Misuse::kNoInputBuffer || kind == Misuse::kOrdinaryInBetween;
      std::vector<std::string> needles = {op, usage                         ? "input_buffer()"
                                              : kind == Misuse::kInsideSlot ? "input overlaps"
                                                                            : "output overlaps"};
      if (last_only) needles.push_back("rank " + std::to_string(W - 1));
      expect_error([&] { h->forward(input, s, output, x); },
                   usage ? Errc::kInvalidUsage : Errc::kInvalidArgument, needles, what);
      EXPECT_TRUE(out == Bytes(out.size(), kPoison))
          << what << ": rank " << r << ": output written";
      EXPECT_TRUE(extra == Bytes(extra.size(), kPoison))
          << what << ": rank " << r << ": extra written";
      checked_call(*h, s, call++, true, true, addr, what + ": the call after");
      if (any_rank(HasFailure())) return;
    }
}

const Case kCases[] = {
    {"all_gather", DType::kFloat32, DType::kFloat32},
    {"all_gather", DType::kBFloat16, DType::kBFloat16},
    {"all_gather_wide", DType::kFloat32, DType::kFloat32},
    {"all_gather_wide", DType::kBFloat16, DType::kBFloat16},
    {"ag_gemm", DType::kFloat32, DType::kFloat32},
    {"ag_gemm", DType::kBFloat16, DType::kBFloat16},
    {"ag_gemm", DType::kBFloat16, DType::kFloat32},
    {"all_to_all_single", DType::kFloat32, DType::kFloat32},
    {"all_to_all_single", DType::kBFloat16, DType::kBFloat16},
    {"a2a_gemm", DType::kFloat32, DType::kFloat32},
    {"a2a_gemm", DType::kBFloat16, DType::kBFloat16},
    {"a2a_gemm", DType::kBFloat16, DType::kFloat32},
};

INSTANTIATE_TEST_SUITE_P(Ops, ZeroCopy, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.op) + "_" + dtype_name(i.param.in) + "_" +
                                  dtype_name(i.param.out);
                         });

}  // namespace
}  // namespace fluxcpp::test
