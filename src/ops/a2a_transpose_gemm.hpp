// AllToAllTransposeGemm (private part; Ulysses, after attention). See
// include/fluxcpp/ulysses.hpp for the contract and docs/ops/a2a_transpose_gemm.md for the
// pipeline.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/ulysses.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::detail {

class A2aTransposeGemmImpl : public ops::OpBase<A2aTransposeGemmOptions> {
 public:
  static constexpr const char* kOp = "a2a_transpose_gemm";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const void* input, int64_t bs, int64_t seq, const void* weight, const void* bias,
               void* output, void* a2a_output);
  void forward_comm_only(const void* input, int64_t bs, int64_t seq, void* a2a_output);
  void forward_gemm_only(int64_t bs, int64_t seq, const void* weight, const void* bias,
                         void* output);

 private:
  struct Args {
    const char* input;
    int64_t bs, seq;
    const void* weight;
    const void* bias;
    char* output;
    char* a2a;  // the exchanged rows [bs · seq/W, nheads · head_dim]
  };
  void run(const ops::Call& call, const Args& a);

  kernels::GemmWeight weight_;
  std::vector<char> a2a_buf_;  // the exchanged rows when the caller does not ask for them
  // a2a-out: the rows this rank packed for each rank t (at t * block), read in place by host
  // peers, sent by the network to other hosts' ranks.
  ops::A2aExchange a2a_;
};

}  // namespace fluxcpp::detail
