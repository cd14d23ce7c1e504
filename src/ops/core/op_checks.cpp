#include "ops/core/op_checks.hpp"

#include <algorithm>

#include "error_util.hpp"
#include "ops/core/options.hpp"

namespace fluxcpp::ops {

std::string check_count(const comm::Parts& c, const char* op, const char* name, int64_t value,
                        int64_t max,
                        std::initializer_list<std::pair<const char*, const void*>> required,
                        const char* max_name) {
  const int r = c.topo().world_rank();
  if (value < 0 || value > max)
    return fmt::format("{}: {}={} must be in [0, {}={}] (rank {})", op, name, value,
                       max_name != nullptr ? std::string(max_name) : fmt::format("max_{}", name),
                       max, r);
  if (value > 0)
    for (const auto& [arg, ptr] : required)
      if (ptr == nullptr)
        return fmt::format("{}: {} is NULL with {}={} (rank {})", op, arg, name, value, r);
  return {};
}

std::string check_forward(const comm::Parts& c, const char* op, int64_t m, int64_t max_m,
                          std::initializer_list<std::pair<const char*, const void*>> required) {
  const int W = c.topo().world_size();
  if (m >= 0 && m <= max_m && m % W != 0)
    return fmt::format("{}: m={} is not divisible by the world size {} (rank {})", op, m, W,
                       c.topo().world_rank());
  return check_count(c, op, "m", m, max_m, required);
}

bool overlaps(const void* a, const void* b, std::size_t bytes) {
  return overlaps(a, bytes, b, bytes);
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

std::string check_packed(const comm::Parts& c, const char* op, const kernels::PackedWeight& w,
                         DType dtype, int64_t n, int64_t k, bool transpose_weight) {
  if (w.dtype() != dtype || w.n() != n || w.k() != k || w.transposed() != transpose_weight)
    return fmt::format(
        "{}: the packed weight ({}, n={}, k={}, transpose_weight={}) does not match the op ({}, "
        "n={}, k={}, transpose_weight={}) (rank {})",
        op, dtype_name(w.dtype()), w.n(), w.k(), w.transposed(), dtype_name(dtype), n, k,
        transpose_weight, c.topo().world_rank());
  return {};
}

bool valid_gemm_dtypes(DType in, DType out) {
  return (in == DType::kFloat32 && out == DType::kFloat32) ||
         (in == DType::kFloat64 && out == DType::kFloat64) ||
         (in == DType::kBFloat16 && (out == DType::kBFloat16 || out == DType::kFloat32));
}

void check_gemm_create(const comm::Parts& c, const char* op, const GemmShape& s,
                       const std::string& local_error, const std::function<void()>& extra) {
  agree_options(
      c, op, local_error,
      {dtype("input_dtype", s.input_dtype), dtype("output_dtype", s.output_dtype),
       dim("n", s.n, INT32_MAX), dim("k", s.k, INT32_MAX), count("max_m", s.max_m, INT32_MAX),
       same("transpose_weight", s.transpose_weight ? 1 : 0)},
      [&] {
        FLUXCPP_CHECK_ARG(valid_gemm_dtypes(s.input_dtype, s.output_dtype),
                          "{}: (input, output) dtypes ({}, {}) are not one of (f32, f32), (f64, "
                          "f64), (bf16, bf16), (bf16, f32) (rank {})",
                          op, dtype_name(s.input_dtype), dtype_name(s.output_dtype),
                          c.topo().world_rank());
        FLUXCPP_CHECK_ARG(s.max_m <= (int64_t{1} << 40) / std::max(s.k, s.n),
                          "{}: max_m={}, n={}, k={} are too large", op, s.max_m, s.n, s.k);
        if (extra) extra();
      });
}

}  // namespace fluxcpp::ops
