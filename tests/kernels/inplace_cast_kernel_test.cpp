// inplace_cast without a context, single process: the thread plan's safety property, every pair
// on every instruction set this CPU has, plans run on concurrent threads and in reverse chain
// order, the public API with ctx == nullptr, its argument errors, and independence from the
// caller's floating-point environment. Results are compared with tests/support/cast_reference.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cast_reference.hpp"
#include "fluxcpp/error.hpp"
#include "fluxcpp/inplace_cast.hpp"
#include "kernels/cast.hpp"
#include "kernels/inplace_cast_kernel.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace fluxcpp::test {
namespace {

using Bytes = std::vector<unsigned char>;
using kernels::CastIsa;
using kernels::CastPlan;
using kernels::CastRange;

constexpr std::size_t kGuard = 64;
constexpr unsigned char kPoison = 0xA5;

struct Case {
  CastPair pair;
  int64_t count;
  Bytes input, expected;
};

// Inputs and reference outputs, computed once per (pair, count).
const Case& case_for(CastPair p, int64_t count) {
  static std::map<std::pair<int, int64_t>, Case> cache;
  const int key = static_cast<int>(p.from) * 3 + static_cast<int>(p.to);
  auto it = cache.find({key, count});
  if (it == cache.end()) {
    Case c{p, count, cast_input(p.from, count, 0x5eed0000u + static_cast<uint64_t>(key)), {}};
    c.expected = cast_expected(c.input, p.from, p.to, count);
    it = cache.emplace(std::make_pair(key, count), std::move(c)).first;
  }
  return it->second;
}

std::size_t footprint(const Case& c) {
  return static_cast<std::size_t>(c.count) *
         std::max(dtype_size(c.pair.from), dtype_size(c.pair.to));
}

// The input at byte `offset` of a buffer with room for the larger dtype, poisoned around it.
Bytes fresh_buffer(const Case& c, std::size_t offset = 0) {
  Bytes b(offset + footprint(c) + kGuard, kPoison);
  std::copy(c.input.begin(), c.input.end(), b.begin() + static_cast<std::ptrdiff_t>(offset));
  return b;
}

// Outputs match the reference and nothing outside the buffer's footprint was written.
void expect_converted(const Bytes& b, const Case& c, const std::string& how,
                      std::size_t offset = 0) {
  std::string report;
  const int64_t bad = cast_mismatches(b.data() + offset, c.expected, c.input, c.pair.from,
                                      c.pair.to, c.count, &report);
  EXPECT_EQ(bad, 0) << how << " " << pair_name(c.pair) << " count=" << c.count << ": " << bad
                    << " wrong elements\n"
                    << report;
  bool guard_ok = true;
  for (std::size_t i = 0; i < offset; ++i) guard_ok = guard_ok && b[i] == kPoison;
  for (std::size_t i = offset + footprint(c); i < b.size(); ++i)
    guard_ok = guard_ok && b[i] == kPoison;
  EXPECT_TRUE(guard_ok) << how << " " << pair_name(c.pair) << " count=" << c.count
                        << ": wrote outside [data, data + count*max(sizeof(from), sizeof(to)))";
}

std::vector<int64_t> sizes_with_odd() {
  std::vector<int64_t> s = cast_small_sizes();
  for (int64_t n : {2, 3, 8, 31, 32, 63, 64, 65, 1000, 4097}) s.push_back(n);
  for (int64_t n : cast_odd_sizes()) s.push_back(n);
  return s;
}

std::vector<CastIsa> isas() {
  std::vector<CastIsa> v;
  for (CastIsa i : {CastIsa::kScalar, CastIsa::kSse2, CastIsa::kAvx2})
    if (kernels::cast_isa_available(i)) v.push_back(i);
  return v;
}
const char* isa_name(CastIsa i) {
  switch (i) {
    case CastIsa::kAuto: return "auto";
    case CastIsa::kScalar: return "scalar";
    case CastIsa::kSse2: return "sse2";
    case CastIsa::kAvx2: return "avx2";
  }
  return "?";
}

// Runs a plan: its chains concurrently on threads (chain 0 on this one), or one after another
// from the last chain to the first.
void run_plan(unsigned char* data, const Case& c, int threads, int doublings, bool concurrent) {
  const DType from = c.pair.from, to = c.pair.to;
  const CastPlan plan = kernels::inplace_cast_plan(c.count, from, to, threads, doublings);
  auto run_chain = [&](std::size_t t) {
    for (const CastRange& r : plan.chains[t])
      kernels::inplace_cast_range(data, r.begin, r.end, from, to);
  };
  const CastRange serial = plan.serial;
  if (plan.serial_first) kernels::inplace_cast_range(data, serial.begin, serial.end, from, to);
  std::vector<std::thread> workers;
  for (std::size_t t = plan.chains.size(); t-- > 0;) {
    if (concurrent && t > 0)
      workers.emplace_back(run_chain, t);
    else
      run_chain(t);
  }
  for (auto& w : workers) w.join();
  if (!plan.serial_first) kernels::inplace_cast_range(data, serial.begin, serial.end, from, to);
}

// ---- the plan -----------------------------------------------------------------------------

using Span = std::pair<int64_t, int64_t>;
bool overlaps(Span a, Span b) {
  return a.first < b.second && b.first < a.second;
}

// The property the threads rely on: while a range runs, nothing it writes is input of a range that
// may not have finished reading, i.e. of another chain (at any progress), of a later range of its
// own chain, or of `serial` when that runs after the chains. And `serial`, when it runs first,
// writes no input of any chain.
TEST(InplaceCastPlan, NoRangeOverwritesInputThatMayStillBeUnread) {
  std::vector<int64_t> counts;
  for (int64_t n = 1; n <= 300; ++n) counts.push_back(n);
  for (int64_t n : cast_odd_sizes()) counts.push_back(n);
  counts.push_back(int64_t{1} << 26);
  for (CastPair p : cast_pairs()) {
    const int64_t sf = static_cast<int64_t>(dtype_size(p.from));
    const int64_t st = static_cast<int64_t>(dtype_size(p.to));
    auto in = [&](CastRange r) { return Span{r.begin * sf, r.end * sf}; };
    auto out = [&](CastRange r) { return Span{r.begin * st, r.end * st}; };
    for (int64_t count : counts)
      for (int threads : {1, 2, 3, 4, 7})
        for (int doublings : {0, 1, 2, 5, 8}) {
          const CastPlan plan = kernels::inplace_cast_plan(count, p.from, p.to, threads, doublings);
          const std::string where = pair_name(p) + " count=" + std::to_string(count) +
                                    " threads=" + std::to_string(threads) +
                                    " doublings=" + std::to_string(doublings);
          ASSERT_EQ(plan.serial_first, sf > st) << where;
          const int64_t a = (count + (int64_t{1} << doublings) - 1) >> doublings;
          ASSERT_EQ(plan.serial.begin, 0) << where;
          ASSERT_EQ(plan.serial.end, std::min(count, a)) << where;
          // Every element in exactly one range.
          std::vector<CastRange> all = {plan.serial};
          for (const auto& chain : plan.chains) all.insert(all.end(), chain.begin(), chain.end());
          std::sort(all.begin(), all.end(),
                    [](const CastRange& x, const CastRange& y) { return x.begin < y.begin; });
          int64_t next = 0;
          for (const CastRange& r : all) {
            ASSERT_EQ(r.begin, next) << where;
            ASSERT_LT(r.begin, r.end) << where;
            next = r.end;
          }
          ASSERT_EQ(next, count) << where;
          ASSERT_TRUE(plan.chains.empty() ||
                      plan.chains.size() == static_cast<std::size_t>(threads))
              << where;
          // The overlaps.
          int64_t most = 0, least = count;
          for (std::size_t t = 0; t < plan.chains.size(); ++t) {
            int64_t total = 0;
            for (std::size_t k = 0; k < plan.chains[t].size(); ++k) {
              const CastRange r = plan.chains[t][k];
              total += r.end - r.begin;
              if (plan.serial_first)
                ASSERT_FALSE(overlaps(out(plan.serial), in(r)))
                    << where << ": serial writes input of chain " << t;
              else
                ASSERT_FALSE(overlaps(out(r), in(plan.serial)))
                    << where << ": chain " << t << " writes input of serial";
              for (std::size_t u = 0; u < plan.chains.size(); ++u)
                for (std::size_t m = u == t ? k + 1 : 0; m < plan.chains[u].size(); ++m)
                  ASSERT_FALSE(overlaps(out(r), in(plan.chains[u][m])))
                      << where << ": chain " << t << " range " << k << " [" << r.begin << ", "
                      << r.end << ") writes input of chain " << u << " range " << m;
            }
            most = std::max(most, total);
            least = std::min(least, total);
          }
          // Balanced: chains differ by the rounding of the cut and the clipping of the top step.
          if (!plan.chains.empty() && a >= threads)
            EXPECT_LE(most - least, (int64_t{2} << doublings) + 1) << where;
        }
  }
}

// ---- the reference ------------------------------------------------------------------------

// A check of the test's own reference: on every generated input it agrees with the C++
// conversions (which compile to the hardware's cvtsd2ss / cvtss2sd) and with the bf16 helpers of
// kernels/cast.hpp (bf16 -> f32 quietened like the other pairs).
TEST(InplaceCastReference, AgreesWithTheCompilersConversions) {
  for (CastPair p : cast_pairs()) {
    const Case& c = case_for(p, 1048571);
    int64_t bad = 0;
    for (int64_t i = 0; i < c.count && bad < 5; ++i) {
      const uint64_t in = load_bits(c.input.data(), p.from, i);
      uint64_t hw = 0;
      if (p.from == DType::kFloat32) {
        float f;
        const auto u = static_cast<uint32_t>(in);
        std::memcpy(&f, &u, 4);
        if (p.to == DType::kBFloat16) {
          hw = kernels::f32_to_bf16(f);
        } else {
          const double d = f;
          std::memcpy(&hw, &d, 8);
        }
      } else if (p.from == DType::kFloat64) {
        double d;
        std::memcpy(&d, &in, 8);
        const float f = static_cast<float>(d);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        hw = u;
      } else {
        const float f = kernels::bf16_to_f32(static_cast<uint16_t>(in));
        uint32_t u;
        std::memcpy(&u, &f, 4);
        hw = std::isnan(f) ? (u | 0x00400000u) : u;
      }
      const uint64_t ref = reference_cast(in, p.from, p.to);
      if (!cast_matches(ref, hw, p.to)) {
        ++bad;
        ADD_FAILURE() << pair_name(p) << " input 0x" << std::hex << in << ": reference 0x" << ref
                      << ", compiler 0x" << hw;
      }
    }
  }
}

// ---- the kernel ---------------------------------------------------------------------------

TEST(InplaceCastKernel, EveryPairOnEveryInstructionSet) {
  for (CastIsa isa : isas())
    for (CastPair p : cast_pairs())
      for (int64_t count : sizes_with_odd()) {
        const Case& c = case_for(p, count);
        // Any alignment: also one and two bytes off.
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
          if (offset > 0 && count > 5000) continue;
          Bytes b = fresh_buffer(c, offset);
          kernels::inplace_cast_range(b.data() + offset, 0, count, p.from, p.to, isa);
          expect_converted(b, c, std::string(isa_name(isa)) + " offset " + std::to_string(offset),
                           offset);
        }
      }
}

TEST(InplaceCastKernel, PlanOnConcurrentThreads) {
  for (CastPair p : cast_pairs())
    for (int64_t count : {int64_t{100000}, int64_t{1048571}, int64_t{4194301}})
      for (int threads : {2, 3, 4})
        for (int doublings : {2, 8}) {
          const Case& c = case_for(p, count);
          Bytes b = fresh_buffer(c);
          run_plan(b.data(), c, threads, doublings, true);
          expect_converted(
              b, c,
              std::to_string(threads) + " threads, " + std::to_string(doublings) + " doublings");
        }
}

TEST(InplaceCastKernel, PlanWithChainsLastFirst) {
  for (CastPair p : cast_pairs())
    for (int64_t count : {int64_t{1}, int64_t{33}, int64_t{1000}, int64_t{2097143}})
      for (int threads : {2, 7})
        for (int doublings : {0, 1, 5, 8}) {
          const Case& c = case_for(p, count);
          Bytes b = fresh_buffer(c);
          run_plan(b.data(), c, threads, doublings, false);
          expect_converted(b, c,
                           std::to_string(threads) + " chains last first, " +
                               std::to_string(doublings) + " doublings");
        }
}

// The comparison catches a split that ignores the overlap: halves of the whole buffer converted in
// the wrong order (upper half first when narrowing, lower half first when widening).
TEST(InplaceCastKernel, PlainSplitInTheWrongOrderIsCaught) {
  for (CastPair p : cast_pairs()) {
    const Case& c = case_for(p, 1000);
    Bytes b = fresh_buffer(c);
    const bool narrowing = dtype_size(p.from) > dtype_size(p.to);
    const int64_t first_b = narrowing ? 500 : 0, first_e = narrowing ? 1000 : 500;
    kernels::inplace_cast_range(b.data(), first_b, first_e, p.from, p.to);
    kernels::inplace_cast_range(b.data(), narrowing ? 0 : 500, narrowing ? 500 : 1000, p.from,
                                p.to);
    EXPECT_GT(cast_mismatches(b.data(), c.expected, c.input, p.from, p.to, c.count, nullptr), 100)
        << pair_name(p);
  }
}

// ---- the public API without a context -----------------------------------------------------

TEST(InplaceCast, NullContextEveryPair) {
  for (CastPair p : cast_pairs())
    for (int64_t count : sizes_with_odd()) {
      const Case& c = case_for(p, count);
      Bytes b = fresh_buffer(c);
      inplace_cast(nullptr, b.data(), count, p.from, p.to);
      expect_converted(b, c, "ctx=nullptr");
    }
}

void expect_invalid(void* data, int64_t count, DType from, DType to,
                    const std::vector<std::string>& words) {
  try {
    inplace_cast(nullptr, data, count, from, to);
    ADD_FAILURE() << "no error for count=" << count << " " << static_cast<int>(from) << "->"
                  << static_cast<int>(to);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("inplace_cast"), std::string::npos) << e.what();
    for (const auto& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
          << "'" << e.what() << "' does not name " << w;
  }
}

TEST(InplaceCast, InvalidArgumentsNameTheValues) {
  Bytes b(64, kPoison);
  const DType all[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16};
  for (DType from : all)
    for (DType to : all) {
      if (kernels::inplace_cast_supported(from, to)) continue;
      expect_invalid(
          b.data(), 4, from, to,
          {std::string("from=") + dtype_name(from), std::string("to=") + dtype_name(to)});
      expect_invalid(b.data(), 0, from, to, {"unsupported"});  // even with nothing to convert
    }
  expect_invalid(b.data(), 4, static_cast<DType>(7), DType::kFloat32, {"from=7"});
  expect_invalid(b.data(), 4, DType::kFloat32, static_cast<DType>(-1), {"to=-1"});
  expect_invalid(b.data(), -1, DType::kFloat32, DType::kBFloat16, {"count=-1"});
  expect_invalid(b.data(), int64_t{1} << 61, DType::kFloat32, DType::kFloat64,
                 {"count=2305843009213693952"});
  expect_invalid(nullptr, 5, DType::kFloat64, DType::kFloat32, {"data is NULL", "count=5"});
  EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](unsigned char x) { return x == kPoison; }))
      << "a rejected call wrote to the buffer";
  EXPECT_NO_THROW(inplace_cast(nullptr, nullptr, 0, DType::kFloat32, DType::kBFloat16));
}

// Rounding toward +Inf, flush-to-zero, denormals-are-zero and an unmasked invalid-operation
// exception in the caller's environment change nothing, and the caller's environment is as it was
// afterwards.
TEST(InplaceCast, IgnoresTheCallersFloatingPointEnvironment) {
  for (CastIsa isa : isas())
    for (CastPair p : cast_pairs()) {
      const Case& c = case_for(p, 4097);
      Bytes b = fresh_buffer(c);
      const int saved_round = std::fegetround();
      ASSERT_EQ(std::fesetround(FE_UPWARD), 0);
#if defined(__SSE2__)
      const unsigned saved_csr = _mm_getcsr();
      // FTZ | DAZ, and FE_INVALID unmasked: a signalling NaN reaching a compare or a conversion
      // under this MXCSR would trap (SIGFPE).
      _mm_setcsr((_mm_getcsr() | 0x8040u) & ~0x0080u);
      const unsigned set_csr = _mm_getcsr();
#endif
      kernels::inplace_cast_range(b.data(), 0, c.count, p.from, p.to, isa);
#if defined(__SSE2__)
      const unsigned after_csr = _mm_getcsr();
      _mm_setcsr(saved_csr);
      EXPECT_EQ(after_csr & ~0x3fu, set_csr & ~0x3fu) << "MXCSR control bits not restored";
#endif
      const int after_round = std::fegetround();
      std::fesetround(saved_round);
      EXPECT_EQ(after_round, FE_UPWARD);
      expect_converted(b, c, std::string(isa_name(isa)) + " under FE_UPWARD + FTZ/DAZ");
    }
}

}  // namespace
}  // namespace fluxcpp::test
