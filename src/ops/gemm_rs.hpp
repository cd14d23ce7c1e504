// GemmRS (private part). See include/fluxcpp/gemm_rs.hpp for the contract and
// docs/ops/gemm_rs.md for the pipeline.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/gemm_rs.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/reduce_exchange.hpp"

namespace fluxcpp::detail {

class GemmRsImpl : public ops::OpBase<GemmRsOptions> {
 public:
  static constexpr const char* kOp = "gemm_rs";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ContextImpl.
  void create(ContextImpl& c, const std::string& local_error);

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output);
  void forward(const void* input, int64_t m, const kernels::PackedWeight& weight, const void* bias,
               void* output);
  void forward_gemm_only(const void* input, int64_t m, const void* weight);
  void forward_comm_only(int64_t m, const void* bias, void* output);

 private:
  // The partial products, block by block into the segment (publishing each block a peer
  // reduces, or the transport sends, as soon as it is done) or in one call when that is cheaper.
  // own_rows(r0, r1): rows [r0, r1) of our own block are done (direct mode sums them at once).
  void compute(const char* input, int64_t m, const void* weight, bool publish,
               const std::function<void(int64_t r0, int64_t r1)>& own_rows = {});
  // Adds the bias to rows [r0, r1) of our own partial (r1 < 0: to the end of the block), in the
  // segment or in `partials` ([m, n], the latency path's payload).
  void add_bias(int64_t m, const void* bias, int64_t r0 = 0, int64_t r1 = -1,
                char* partials = nullptr);
  // The latency path: our block summed from the host ranks' payloads.
  void sum_payloads(int64_t m, void* output);
  // Starts the reduce exchange of a call with m rows.
  void begin(int64_t m);
  void reduce(int64_t m, void* output);
  // forward with copy offload (one host, three or more ranks): see gemm_rs.cpp.
  void compute_offloaded(const char* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  // This rank's partial product of row block t, in the accumulation dtype.
  char* partial(int t, int64_t m) const;

  DType acc_ = DType::kFloat32;
  kernels::GemmWeight weight_;
  const kernels::PackedWeight* packed_ = nullptr;  // the weight during a packed forward
  // The shares of the reduce exchange are this rank's partial products, [m, n] densely in the
  // accumulation dtype (block t at t * m/W rows).
  ops::ReduceExchange reduce_;
};

}  // namespace fluxcpp::detail
