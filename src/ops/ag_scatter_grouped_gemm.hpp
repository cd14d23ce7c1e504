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

  // How a call runs (ops::MoeTpSchedule): its GEMMs over all rows at once, or rank by rank.
  using Schedule = ops::MoeTpSchedule;
  // The schedule of a call on `path` with `rows` routed rows on this rank, and the last call's.
  Schedule plan(ops::Path path, int64_t rows) const { return routing_.plan(path, rows); }
  const Schedule& last_schedule() const { return schedule_; }

 private:
  void call(ops::Path path, const ops::MoeTpCall& a);
  void run(const Schedule& s, const ops::MoeTpCall& a);
  // One function per schedule (ag_scatter_grouped_gemm.cpp), and the steps they share.
  void run_all_rows(const ops::MoeTpCall& a);
  void run_by_rank(const ops::MoeTpCall& a);
  void run_gemm_only(const Schedule& s, const ops::MoeTpCall& a);
  void run_comm_only(const ops::MoeTpCall& a);
  // Starts the gather and publishes this rank's tokens.
  void stage(const ops::MoeTpCall& a);
  // kAllRows' GEMMs: one per expert over every source's rows, read from the segments once they
  // have landed (held: as the buffers hold them, without waiting).
  void compute_all_rows(const ops::MoeTpCall& a, bool held);
  // Source g's rows as its block lands: in pieces when it is on the link.
  void compute_landing(int g, const ops::MoeTpCall& a);
  // The gathered tokens, when asked for.
  void copy_gathered(const ops::MoeTpCall& a);
  // Where global token t's row is read.
  using RowSource = std::function<const char*(int32_t t)>;
  // Token t's row in `block`, the rows of tokens from t0 on.
  RowSource rows_of(const char* block, int64_t t0) const {
    return [block, t0, this](int32_t t) { return block + (t - t0) * in_row_; };
  }
  // The rows of slots [begin, end) of `slots`: gathered expert by expert, one GEMM per expert.
  void compute(const std::vector<ops::RoutedSlot>& slots, std::size_t begin, std::size_t end,
               const RowSource& src, const ops::MoeTpCall& a);
  int64_t per(const ops::MoeTpCall& a) const { return a.T / ctx_->topo().world_size(); }
  std::size_t block(const ops::MoeTpCall& a) const {
    return static_cast<std::size_t>(per(a)) * in_row_;
  }

  Schedule schedule_;                     // the current (or last) call's
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
