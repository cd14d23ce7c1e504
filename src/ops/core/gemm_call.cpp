#include "ops/core/gemm_call.hpp"

namespace fluxcpp::ops {

std::string check_gemm_call(const comm::Parts& c, const char* op, Path path, const GemmCall& a,
                            int64_t max_m, const GemmShape& shape) {
  std::string error =
      path == Path::kCommOnly
          ? check_forward(c, op, a.m, max_m, {{"input", a.input}})
          : check_forward(c, op, a.m, max_m,
                          {{"input", a.input}, {"weight", a.weight}, {"output", a.output}});
  if (error.empty() && a.packed != nullptr)
    error =
        check_packed(c, op, *a.packed, shape.input_dtype, shape.n, shape.k, shape.transpose_weight);
  return error;
}

}  // namespace fluxcpp::ops
