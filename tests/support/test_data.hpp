// Test data and checks shared by the op tests (tests/ops): deterministic random tensors, bf16
// conversions and element access, poisoned output buffers, comparisons against a reference
// (within a tolerance, or bit for bit), error expectations and MPI reference helpers.
//
// Failure messages name the calling rank (world_rank()); every helper is header-only.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"
#include "mpi_test.hpp"

namespace fluxcpp::test {

using Bytes = std::vector<unsigned char>;

// ---- deterministic data --------------------------------------------------------------------

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Seeds that differ by rank, call and tensor (salt).
inline uint64_t seed_of(int rank, int call, int salt) {
  return 0xD1B54A32D192ED03ull * (static_cast<uint64_t>(rank) + 1) +
         0x2545F4914F6CDD1Dull * (static_cast<uint64_t>(call) + 7) +
         0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(salt) + 3);
}

// bf16 bits of a value in (-1, 1): random sign, exponent 2^-1 down to 2^-exponents (12: 2^-12),
// 7 random mantissa bits.
inline uint16_t random_bf16(uint64_t r, unsigned exponents = 12) {
  const uint16_t sign = static_cast<uint16_t>(r & 1u);
  const uint16_t exp = static_cast<uint16_t>(126 - (r >> 1) % exponents);
  const uint16_t mant = static_cast<uint16_t>((r >> 8) & 0x7fu);
  return static_cast<uint16_t>((sign << 15) | (exp << 7) | mant);
}

// `count` elements of `t`, values in [-1, 1], exactly representable in `t` (bf16 made as bits).
inline Bytes random_tensor(DType t, std::size_t count, uint64_t seed) {
  Bytes b(count * dtype_size(t));
  uint64_t s = seed;
  for (std::size_t i = 0; i < count; ++i) {
    const uint64_t r = splitmix(s);
    switch (t) {
      case DType::kFloat32: {
        float v = static_cast<float>(static_cast<int64_t>(r >> 40) - (int64_t{1} << 23)) /
                  static_cast<float>(1 << 23);
        std::memcpy(b.data() + 4 * i, &v, 4);
        break;
      }
      case DType::kFloat64: {
        double v = static_cast<double>(static_cast<int64_t>(r >> 10) - (int64_t{1} << 53)) /
                   std::ldexp(1.0, 53);
        std::memcpy(b.data() + 8 * i, &v, 8);
        break;
      }
      case DType::kBFloat16: {
        uint16_t v = random_bf16(r);
        std::memcpy(b.data() + 2 * i, &v, 2);
        break;
      }
    }
  }
  return b;
}

// Overwrites the first `count` elements of b with fresh random values (random_tensor's).
inline void refill(Bytes& b, DType t, std::size_t count, uint64_t seed) {
  Bytes fresh = random_tensor(t, count, seed);
  if (!fresh.empty()) std::memcpy(b.data(), fresh.data(), fresh.size());
}

// ---- element access ------------------------------------------------------------------------

inline float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest, ties to even (values here are never NaN).
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Element i of a tensor of dtype t, widened exactly to double.
inline double load(const unsigned char* p, DType t, std::size_t i) {
  switch (t) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return bf16_to_float(v);
    }
  }
  return 0.0;
}

// The bits of element i, as "0x" and 2 * dtype_size(t) hex digits.
inline std::string hex_of(const unsigned char* p, DType t, std::size_t i) {
  const std::size_t esz = dtype_size(t);
  uint64_t u = 0;
  std::memcpy(&u, p + esz * i, esz);  // little endian
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", static_cast<int>(2 * esz),
                static_cast<unsigned long long>(u));
  return buf;
}

inline std::vector<float> widen_f32(const Bytes& b, DType t, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(load(b.data(), t, i));
  return v;
}

inline std::vector<double> widen_f64(const Bytes& b, DType t, std::size_t count) {
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = load(b.data(), t, i);
  return v;
}

// The values as a tensor of dtype t (f32 and bf16 round to nearest even).
inline Bytes narrow(const std::vector<double>& v, DType t) {
  Bytes b(v.size() * dtype_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    const uint16_t h = float_to_bf16(f);
    switch (t) {
      case DType::kFloat32: std::memcpy(b.data() + 4 * i, &f, 4); break;
      case DType::kFloat64: std::memcpy(b.data() + 8 * i, &v[i], 8); break;
      case DType::kBFloat16: std::memcpy(b.data() + 2 * i, &h, 2); break;
    }
  }
  return b;
}

// ---- poisoned outputs ----------------------------------------------------------------------

// Output buffers start as all-ones bytes (NaN in every dtype): unwritten elements fail.
constexpr unsigned char kPoison = 0xFF;
// Elements after the output block that must stay untouched.
constexpr std::size_t kGuardElems = 17;

// A poisoned output buffer for `count` elements plus a guard.
inline Bytes poisoned_output(DType t, std::size_t count) {
  return Bytes((count + kGuardElems) * dtype_size(t), kPoison);
}

// Bytes from `from` on are still `poison` (the buffer is named `tensor` in the message).
inline bool expect_untouched(const Bytes& out, std::size_t from, const std::string& what,
                             unsigned char poison = kPoison, const char* tensor = "output") {
  for (std::size_t i = from; i < out.size(); ++i)
    if (out[i] != poison) {
      ADD_FAILURE() << what << ": rank " << world_rank() << ": " << tensor << " written at byte "
                    << i << " (beyond the " << from << " bytes this rank's call may write)";
      return false;
    }
  return true;
}

// ---- comparisons ---------------------------------------------------------------------------

// Expected output and a per-element tolerance.
struct Reference {
  std::vector<double> value;  // before any bf16 rounding of the output
  std::vector<double> tol;
};

// Number of the first `count` elements of got (dtype t) outside the reference's tolerance; the
// first few are reported with rank, where(i) (the element's multi-index), expected and got.
inline int64_t expect_close_at(const Reference& ref, const Bytes& got, DType t, std::size_t count,
                               const std::string& what,
                               const std::function<std::string(std::size_t)>& where,
                               int max_reports = 4) {
  int64_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double g = load(got.data(), t, i), e = ref.value[i];
    if (std::fabs(g - e) <= ref.tol[i]) continue;  // NaN fails here too
    if (bad < max_reports) {
      std::ostringstream os;
      os << std::setprecision(10) << what << ": rank " << world_rank() << " " << where(i)
         << ": expected " << e;
      if (t == DType::kBFloat16)
        os << " (bf16 " << bf16_to_float(float_to_bf16(static_cast<float>(e))) << ")";
      os << " ± " << ref.tol[i] << ", got " << g;
      ADD_FAILURE() << os.str();
    }
    ++bad;
  }
  if (bad > max_reports)
    ADD_FAILURE() << what << ": rank " << world_rank() << ": " << bad << " of " << count
                  << " elements out of tolerance";
  return bad;
}

// expect_close_at of got's first rows*n elements (dtype out), element i named "row <first_row +
// row> col <col>".
inline int64_t expect_close(const Reference& ref, const Bytes& got, DType out, int64_t rows,
                            int64_t n, const std::string& what, int64_t first_row = 0,
                            int max_reports = 4) {
  const auto where = [n, first_row](std::size_t i) {
    const int64_t x = static_cast<int64_t>(i);
    return "row " + std::to_string(first_row + x / n) + " col " + std::to_string(x % n);
  };
  return expect_close_at(ref, got, out, static_cast<std::size_t>(rows * n), what, where,
                         max_reports);
}

// Bitwise comparison of the first want.size() bytes of got (elements of dtype t) of the tensor
// `tensor`; reports the first few differing elements, element i named where(i). Returns true if
// equal.
inline bool expect_same_elements(const Bytes& want, const Bytes& got, DType t,
                                 const std::function<std::string(std::size_t)>& where,
                                 const std::string& what, const std::string& tensor = "output") {
  const std::size_t esz = dtype_size(t);
  if (got.size() < want.size()) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": " << tensor << " too small";
    return false;
  }
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size()) == 0) return true;
  const std::size_t count = want.size() / esz;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(want.data() + i * esz, got.data() + i * esz, esz) == 0) continue;
    if (bad < 4) {
      std::ostringstream os;
      os << std::setprecision(17) << what << ": rank " << world_rank() << " " << where(i)
         << ": expected " << load(want.data(), t, i) << " (" << hex_of(want.data(), t, i)
         << "), got " << load(got.data(), t, i) << " (" << hex_of(got.data(), t, i) << ")";
      ADD_FAILURE() << os.str();
    }
    ++bad;
  }
  if (bad > 4)
    ADD_FAILURE() << what << ": rank " << world_rank() << ": " << bad << " of " << count << " "
                  << tensor << " elements differ";
  return false;
}

// expect_same_elements of rows of n elements, element i named "<row_word> <row> col <col>".
inline bool expect_same_bits(const Bytes& want, const Bytes& got, DType t, int64_t n,
                             const std::string& what, const char* row_word = "row") {
  const auto where = [n, row_word](std::size_t i) {
    return std::string(row_word) + " " + std::to_string(i / static_cast<std::size_t>(n)) + " col " +
           std::to_string(i % static_cast<std::size_t>(n));
  };
  return expect_same_elements(want, got, t, where, what);
}

// Runs fn, expecting Error(code) whose message contains every string of `needles`.
template <typename F>
void expect_error(F&& fn, Errc code, std::vector<std::string> needles, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": rank " << world_rank() << ": no error raised";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code))
        << what << ": rank " << world_rank() << ": " << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << what << ": rank " << world_rank() << ": message lacks '" << n << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": not a fluxcpp::Error: " << e.what();
  }
}

// Runs fn; an exception fails the test, naming `what`, the rank and the exception's message.
// Returns false then.
template <typename F>
bool expect_no_throw(F&& fn, const std::string& what) {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": rank " << world_rank() << ": threw: " << e.what();
    return false;
  }
}

// ---- MPI references --------------------------------------------------------------------------

// got's first `bytes` equal rank 0's (ops whose result is the same bits on every rank).
// Collective.
inline bool expect_same_on_every_rank(const Bytes& got, std::size_t bytes,
                                      const std::string& what) {
  Bytes root(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(bytes));
  if (bytes > 0) MPI_Bcast(root.data(), static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  const bool same = std::equal(root.begin(), root.end(), got.begin());
  EXPECT_TRUE(same) << what << ": rank " << world_rank() << " differs from rank 0";
  return same;
}

// After a barrier (every rank's ops gone): no segment this process created is left in /dev/shm.
// Collective.
inline void expect_no_segments_left() {
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<std::string> left = fluxcpp_shm_entries(/*own_only=*/true);
  EXPECT_TRUE(left.empty()) << "rank " << world_rank() << ": " << left.size()
                            << " fluxcpp segment(s) left in /dev/shm, first " << left.front();
}

// MPI_Allgather of `rows` rows of `row_bytes` bytes from every rank.
inline Bytes mpi_allgather(const Bytes& mine, int64_t rows, std::size_t row_bytes) {
  const int W = world_size();
  const std::size_t shard = static_cast<std::size_t>(rows) * row_bytes;
  Bytes all(shard * W);
  MPI_Allgather(mine.data(), static_cast<int>(shard), MPI_BYTE, all.data(), static_cast<int>(shard),
                MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

// MPI_Alltoallv of rows of `row_bytes` bytes: in_splits[t] rows go to rank t, out_splits[s] rows
// come from rank s, each side in rank order.
inline Bytes mpi_alltoallv(const Bytes& mine, const std::vector<int64_t>& in_splits,
                           const std::vector<int64_t>& out_splits, std::size_t row_bytes) {
  const int W = world_size();
  std::vector<int> sc(W), sd(W), rc(W), rd(W);
  int so = 0, ro = 0;
  for (int t = 0; t < W; ++t) {
    sc[t] = static_cast<int>(in_splits[t] * row_bytes), sd[t] = so, so += sc[t];
    rc[t] = static_cast<int>(out_splits[t] * row_bytes), rd[t] = ro, ro += rc[t];
  }
  Bytes all(static_cast<std::size_t>(ro));
  MPI_Alltoallv(mine.data(), sc.data(), sd.data(), MPI_BYTE, all.data(), rc.data(), rd.data(),
                MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

}  // namespace fluxcpp::test
