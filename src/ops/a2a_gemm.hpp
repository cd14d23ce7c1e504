// All-to-all + GEMM (private part). See include/fluxcpp/a2a_gemm.hpp for the contract and
// docs/ops/a2a_gemm.md for the pipeline.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/a2a_gemm.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/gemm_op.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class A2aGemmImpl : public ops::GemmOpBase<A2aGemmImpl, A2aGemmOptions> {
 public:
  static constexpr const char* kOp = "a2a_gemm";
  using GemmOpBase::GemmOpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // GemmOpBase's hooks.
  char* input_slot() { return a2a_.out_slot(); }
  std::size_t input_bytes(std::size_t m) const { return m * in_row_; }
  void run(const ops::Call& call, const ops::GemmCall& a);

 private:
  // Equal blocks: block t of a rank's input at t * blk, rank s's block at s * blk of a2a-in.
  static ops::A2aExchange::Plan plan(std::size_t blk);

  // a2a-out: this rank's input staged block by block (block t at t * m/W rows), read in place by
  // host peers' GEMMs and sent by the network (also the zero-copy input buffer); a2a-in: the blocks
  // received from other hosts.
  ops::A2aExchange a2a_;
};

}  // namespace fluxcpp::detail
