// GemmGroupedV3AGScatter (private part). See include/fluxcpp/ag_scatter_grouped_gemm.hpp for the
// contract and docs/ops/ag_scatter_grouped_gemm.md for the pipeline.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/ag_scatter_grouped_gemm.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/expert_weights.hpp"
#include "ops/core/gather_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/moe_tp_routing.hpp"

namespace fluxcpp::detail {

class AgScatterGroupedGemmImpl : public ops::OpBase<MoeTpOptions> {
 public:
  // local_error: a problem the C layer found (e.g. a NULL out-pointer).
  static constexpr const char* kOp = "ag_scatter_grouped_gemm";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const void* input, int64_t T, const int64_t* splits, const int32_t* scatter_index,
               const void* weight, const float* scale, void* output, void* gathered_input);
  void forward_gemm_only(const void* input, int64_t T, const int64_t* splits,
                         const int32_t* scatter_index, const void* weight, const float* scale,
                         void* output);
  void forward_comm_only(const void* input, int64_t T, const int64_t* splits,
                         const int32_t* scatter_index, void* gathered_input);

 private:
  void call(ops::Path path, const ops::MoeTpCall& a);
  void run(const ops::Call& call, const ops::MoeTpCall& a);
  // Where global token t's row is read.
  using RowSource = std::function<const char*(int32_t t)>;
  // The rows of slots [begin, end) of `slots`: gathered expert by expert, one GEMM per expert.
  void compute(const std::vector<ops::RoutedSlot>& slots, std::size_t begin, std::size_t end,
               const RowSource& src, const ops::MoeTpCall& a);
  // Whether this call computes source by source (own tokens first, then each block as it lands):
  // when a local expert gets about kPieceRows rows or more per source (a function of the routing
  // and the shape, the same on every call with the same routing).
  bool pipelined(int W) const;

  std::size_t in_row_ = 0, out_row_ = 0;  // bytes of a token row, an output row
  ops::MoeTpRouting routing_;
  int64_t hashes_[ops::kMoeTpVector] = {};  // this call's, published in the handshake
  ops::ExpertWeights weights_;              // [L], prepared once per call when used
  std::vector<char> a_rows_, c_rows_;       // gathered A rows, GEMM rows to scatter
  std::vector<ops::RoutedSlot> all_;        // every source's slots, when computed in one pass
  std::vector<int32_t> order_;
  std::vector<int64_t> first_;
  ops::GatherExchange gather_;
};

}  // namespace fluxcpp::detail
