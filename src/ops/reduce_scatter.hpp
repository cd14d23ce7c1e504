// ReduceScatter (private part). See include/fluxcpp/reduce_scatter.hpp for the contract and
// docs/ops/reduce_scatter.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/reduce_scatter.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/reduce_exchange.hpp"

namespace fluxcpp::detail {

class ReduceScatterImpl : public ops::OpBase<ReduceScatterOptions> {
 public:
  static constexpr const char* kOp = "reduce_scatter";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const void* input, int64_t m, void* output);

 private:
  void run(const char* input, int64_t m, char* output);

  DType acc_ = DType::kFloat32;  // accumulation dtype
  ops::ReduceExchange reduce_;
};

}  // namespace fluxcpp::detail
