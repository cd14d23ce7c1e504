// GemmAR (private part). See include/fluxcpp/gemm_ar.hpp for the contract and docs/ops/gemm_ar.md
// for the algorithm.
#pragma once

#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/gemm_ar.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/all_reduce_exchange.hpp"
#include "ops/core/op_base.hpp"

namespace fluxcpp::detail {

class GemmArImpl : public ops::OpBase<GemmArOptions> {
 public:
  static constexpr const char* kOp = "gemm_ar";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ContextImpl.
  void create(ContextImpl& c, const std::string& local_error);

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output);
  void forward(const void* input, int64_t m, const kernels::PackedWeight& weight, const void* bias,
               void* output);

 private:
  // This rank's partial product [m, n] into `partial` (accumulation dtype).
  void gemm(const char* input, int64_t m, const void* bias, char* partial);

  DType acc_ = DType::kFloat32;
  kernels::GemmWeight weight_;
  const kernels::PackedWeight* packed_ = nullptr;  // the weight during a packed forward
  std::vector<char> bias_acc_;                     // bias widened to the accumulation dtype
  // Its input slot holds this rank's partial product [m, n] in the accumulation dtype.
  ops::AllReduceExchange reduce_;
};

}  // namespace fluxcpp::detail
