// GemmGroupedV3GatherRS (private part). See include/fluxcpp/grouped_gemm_gather_rs.hpp for the
// contract and docs/ops/grouped_gemm_gather_rs.md for the pipeline.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/grouped_gemm_gather_rs.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/expert_weights.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/moe_tp_routing.hpp"

namespace fluxcpp::detail {

class GroupedGemmGatherRsImpl : public ops::OpBase<MoeTpOptions> {
 public:
  // local_error: a problem the C layer found (e.g. a NULL out-pointer).
  static constexpr const char* kOp = "grouped_gemm_gather_rs";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const void* input, int64_t T, const int64_t* splits, const int32_t* scatter_index,
               const void* weight, const float* routing_weights, void* output);
  void forward_gemm_only(const void* input, int64_t T, const int64_t* splits,
                         const int32_t* scatter_index, const void* weight,
                         const float* routing_weights);
  void forward_comm_only(int64_t T, const int64_t* splits, const int32_t* scatter_index,
                         const float* routing_weights, void* output);

  // How a call runs (ops::MoeTpSchedule): its GEMMs over all rows at once, or rank by rank.
  using Schedule = ops::MoeTpSchedule;
  // The schedule of a call on `path` with `rows` routed rows on this rank, and the last call's.
  Schedule plan(ops::Path path, int64_t rows) const { return routing_.plan(path, rows); }
  const Schedule& last_schedule() const { return schedule_; }

 private:
  void call(ops::Path path, const ops::MoeTpCall& a);
  void run(const Schedule& s, const ops::MoeTpCall& a);
  // The partials for the other ranks first, in ring order (peers do not all wait for the same
  // rank), each published as soon as it is done when `publish`; our own last.
  void compute(const Schedule& s, const ops::MoeTpCall& a, bool publish);
  void run_comm_only(const ops::MoeTpCall& a);
  // This rank's partial of rank t's tokens into share t: per token the k-ordered weighted sum of
  // its slots' GEMM rows (kByRank: computed here, expert by expert; kAllRows: all_rows').
  void partial(const Schedule& s, int t, const ops::MoeTpCall& a);
  // kByRank: the GEMM rows of `slots`, expert by expert, into y_rows_ (y_of_: where).
  void destination_rows(const std::vector<ops::RoutedSlot>& slots, const ops::MoeTpCall& a);
  // kAllRows: Y for all of this rank's rows, one GEMM per expert.
  void all_rows(const ops::MoeTpCall& a);
  // The fixed-order sum over the source ranks of this rank's block, rounded once into output.
  void reduce(const ops::MoeTpCall& a);
  // Y rows [0, n) = rows · W^T in the accumulator type (see the .cpp for the split).
  void gemm(const kernels::GemmWeight& w, const char* rows, int64_t n, const kernels::GemmOut& o);
  char* share_of(int t) const;  // this rank's partial for rank t, in our out slot

  Schedule schedule_;  // the current (or last) call's
  DType acc_ = DType::kFloat32;
  std::size_t in_row_ = 0, acc_row_ = 0;  // bytes of an input row, an accumulator row
  std::size_t share_ = 0;                 // bytes of one share in the current call
  ops::MoeTpRouting routing_;
  int64_t hashes_[ops::kMoeTpVector] = {};  // this call's, published in the handshake
  ops::ExpertWeights weights_;              // [L], prepared once per call when used
  std::vector<char> a_rows_, y_rows_;       // gathered input rows, their GEMM rows (acc type)
  std::vector<int64_t> y_of_;               // slot index -> row in y_rows_
  std::vector<int32_t> order_;
  std::vector<int64_t> first_;
  std::vector<char> acc_buf_;  // the running sum over source ranks, [max_tokens/W, hidden]
  ops::A2aExchange a2a_;
};

}  // namespace fluxcpp::detail
