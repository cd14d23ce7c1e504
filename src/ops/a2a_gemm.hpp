// All-to-all + GEMM (private part). See include/fluxcpp/a2a_gemm.hpp for the contract and
// docs/ops/a2a_gemm.md for the pipeline.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/a2a_gemm.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class A2aGemmImpl : public ops::OpBase<A2aGemmOptions> {
 public:
  static constexpr const char* kOp = "a2a_gemm";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ContextImpl.
  void create(ContextImpl& c, const std::string& local_error);

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output,
               void* a2a_output);
  void forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  void forward_comm_only(const void* input, int64_t m, void* a2a_output);
  void* input_buffer() { return zero_copy_.acquire(*core_, a2a_.out_slot()); }

 private:
  void call(ops::Path path, const ops::GemmCall& a);
  void run(const ops::Call& call, const ops::GemmCall& a);
  // Equal blocks: block t of a rank's input at t * blk, rank s's block at s * blk of a2a-in.
  static ops::A2aExchange::Plan plan(std::size_t blk);

  std::size_t in_row_ = 0, out_row_ = 0;  // bytes per row of input and output
  kernels::GemmWeight weight_;
  std::vector<char> local_;  // gather mode: the exchanged rows, [max_m, k]
  // a2a-out: this rank's input staged block by block (block t at t * m/W rows), read in place by
  // host peers' GEMMs and sent by MPI (also the zero-copy input buffer); a2a-in: the blocks
  // received from other hosts.
  ops::A2aExchange a2a_;
  ops::ZeroCopyInput zero_copy_;
};

}  // namespace fluxcpp::detail
