// GemmAllToAllTranspose (private part; Ulysses, before attention). See
// include/fluxcpp/ulysses.hpp for the contract and docs/ops/gemm_a2a_transpose.md for the
// pipeline.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/parts.hpp"
#include "fluxcpp/ulysses.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::detail {

class GemmA2aTransposeImpl : public ops::OpBase<GemmA2aTransposeOptions> {
 public:
  static constexpr const char* kOp = "gemm_a2a_transpose";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const void* input, int64_t bs, int64_t seq, const void* weight, const void* bias,
               void* output);
  void forward_gemm_only(const void* input, int64_t bs, int64_t seq, const void* weight,
                         const void* bias);
  void forward_comm_only(int64_t bs, int64_t seq, void* output);

 private:
  void run(const ops::Call& call, const char* input, int64_t bs, int64_t seq, const void* weight,
           const void* bias, char* output);

  kernels::GemmWeight weight_;
  // a2a-out: the column block this rank computed for each rank t (at t * block); host peers read
  // it in place, the network sends it to other hosts' ranks.
  ops::A2aExchange a2a_;
};

}  // namespace fluxcpp::detail
