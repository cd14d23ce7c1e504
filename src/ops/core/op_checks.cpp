#include "ops/core/op_checks.hpp"

#include <algorithm>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"

namespace fluxcpp::ops {

std::string check_forward(const detail::ContextImpl& c, const char* op, int64_t m, int64_t max_m,
                          std::initializer_list<std::pair<const char*, const void*>> required) {
  const int W = c.world_size(), r = c.world_rank();
  if (m < 0 || m > max_m)
    return fmt::format("{}: m={} must be in [0, max_m={}] (rank {})", op, m, max_m, r);
  if (m % W != 0)
    return fmt::format("{}: m={} is not divisible by the world size {} (rank {})", op, m, W, r);
  if (m > 0)
    for (const auto& [name, ptr] : required)
      if (ptr == nullptr) return fmt::format("{}: {} is NULL with m={} (rank {})", op, name, m, r);
  return {};
}

std::string check_packed(const detail::ContextImpl& c, const char* op,
                         const kernels::PackedWeight& w, DType dtype, int64_t n, int64_t k,
                         bool transpose_weight) {
  if (w.dtype() != dtype || w.n() != n || w.k() != k || w.transposed() != transpose_weight)
    return fmt::format(
        "{}: the packed weight ({}, n={}, k={}, transpose_weight={}) does not match the op ({}, "
        "n={}, k={}, transpose_weight={}) (rank {})",
        op, dtype_name(w.dtype()), w.n(), w.k(), w.transposed(), dtype_name(dtype), n, k,
        transpose_weight, c.world_rank());
  return {};
}

namespace {

bool valid_pair(DType in, DType out) {
  return (in == DType::kFloat32 && out == DType::kFloat32) ||
         (in == DType::kFloat64 && out == DType::kFloat64) ||
         (in == DType::kBFloat16 && (out == DType::kBFloat16 || out == DType::kFloat32));
}

}  // namespace

void check_gemm_create(detail::ContextImpl& c, const char* op, const GemmShape& s,
                       const std::string& local_error, const std::function<void()>& extra) {
  // close() is collective, so this local check gives the same answer on every rank.
  if (c.closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", op);
  MPI_Comm comm = c.comm();
  comm::agree(comm, [&] {
    if (!local_error.empty())
      raise(Errc::kInvalidArgument, "{}: {} (rank {})", op, local_error, c.world_rank());
    FLUXCPP_CHECK_ARG(dtype_valid(s.input_dtype) && dtype_valid(s.output_dtype) &&
                          valid_pair(s.input_dtype, s.output_dtype),
                      "{}: (input, output) dtypes ({}, {}) are not one of (f32, f32), (f64, f64), "
                      "(bf16, bf16), (bf16, f32) (rank {})",
                      op, dtype_name(s.input_dtype), dtype_name(s.output_dtype), c.world_rank());
    FLUXCPP_CHECK_ARG(s.n >= 1 && s.k >= 1, "{}: n={} and k={} must be >= 1 (rank {})", op, s.n,
                      s.k, c.world_rank());
    FLUXCPP_CHECK_ARG(s.max_m >= 0, "{}: max_m={} must be >= 0", op, s.max_m);
    FLUXCPP_CHECK_ARG(s.n <= INT32_MAX && s.k <= INT32_MAX && s.max_m <= INT32_MAX &&
                          s.max_m <= (int64_t{1} << 40) / std::max(s.k, s.n),
                      "{}: max_m={}, n={}, k={} are too large (BLAS sizes are int)", op, s.max_m,
                      s.n, s.k);
    if (extra) extra();
  });
  comm::agree_value(comm, op, "max_m", s.max_m);
  comm::agree_value(comm, op, "n", s.n);
  comm::agree_value(comm, op, "k", s.k);
  comm::agree_value(comm, op, "input_dtype", static_cast<int>(s.input_dtype));
  comm::agree_value(comm, op, "output_dtype", static_cast<int>(s.output_dtype));
  comm::agree_value(comm, op, "transpose_weight", s.transpose_weight ? 1 : 0);
}

}  // namespace fluxcpp::ops
