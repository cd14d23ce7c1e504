// GemmRS (private part). See include/fluxcpp/gemm_rs.hpp for the contract and
// docs/ops/gemm_rs.md for the pipeline.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/gemm_rs.hpp"
#include "kernels/gemm.hpp"
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

class GemmRsImpl {
 public:
  // local_error: see ContextImpl.
  GemmRsImpl(std::shared_ptr<ContextImpl> ctx, const GemmRsOptions& options,
             const std::string& local_error = {});

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output);
  void forward_gemm_only(const void* input, int64_t m, const void* weight);
  void forward_comm_only(int64_t m, const void* bias, void* output);
  const GemmRsOptions& options() const { return opts_; }

 private:
  std::string validate(const void* input, int64_t m, const void* weight, const void* output,
                       bool gemm, bool reduce) const;
  // The partial products, block by block into the segment (publishing each block a peer
  // reduces as soon as it is done) or in one call when that is cheaper.
  void compute(const char* input, int64_t m, const void* weight, bool publish);
  void add_bias(int64_t m, const void* bias);
  void reduce(int64_t m, void* output);
  // forward with copy offload (one host, three or more ranks): see gemm_rs.cpp.
  void compute_offloaded(const char* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  char* partial(int q, int t, int64_t m) const;

  std::shared_ptr<ContextImpl> ctx_;
  GemmRsOptions opts_;
  DType acc_ = DType::kFloat32;
  kernels::GemmWeight weight_;
  std::vector<char> bias_acc_;  // bias widened to the accumulation dtype
  std::vector<char> host_sum_;  // multi-host scratch
  std::vector<char> presum_;    // copy offload: the peers' partials of our block, summed
  // Slots [0, W) together hold this rank's partial products, [m, n] densely in the accumulation
  // dtype (block t at t * m/W rows); [W, W+2N) are the host sums of reduce_row_blocks.
  std::optional<ops::BlockExchange> ex_;
};

}  // namespace fluxcpp::detail
