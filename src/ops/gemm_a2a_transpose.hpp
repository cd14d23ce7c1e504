// GemmAllToAllTranspose (private part; Ulysses, before attention). See
// include/fluxcpp/ulysses.hpp for the contract and docs/ops/gemm_a2a_transpose.md for the
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
#include "ops/ulysses_shapes.hpp"

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

  // How a call runs, chosen by GemmA2aTransposeImpl::plan from the call's path and the host
  // layout: one order of steps (the blocks computed in the exchange's send order, ours last, the
  // sources' rows placed as they land), whose placing copy offload moves to a comm stream. The
  // split into GEMM calls is the same on every path. gemm-only runs its GEMMs into a2a-out;
  // comm-only its exchange of what a2a-out holds.
  struct Schedule {
    ops::Path path = ops::Path::kFused;  // which steps run: all, the GEMMs, the exchange
    bool offload = false;  // a comm stream places the sources' rows (copy offload; rank-local)
  };
  // The schedule of a call on `path`, and the last call's.
  Schedule plan(ops::Path path) const;
  const Schedule& last_schedule() const { return schedule_; }

 private:
  using Args = ops::UlyssesCall;
  void call(ops::Path path, ops::CallDescriptor& d, const Args& a);
  void run(const Schedule& s, const Args& a);
  // One function per path of the schedule (gemm_a2a_transpose.cpp), and the steps they share.
  void run_fused(const Schedule& s, const Args& a);
  void run_gemm_only(const Args& a);
  void run_comm_only(const Args& a);
  // Columns [t·cols, (t+1)·cols) of y = input · weightᵀ + bias (the head group of rank t) into
  // block t of a2a-out, each finished tile published in `box` (empty: none).
  void gemm_block(const Args& a, int t, const ops::Outbox& box);
  // Rows [i0, i1) (row i = (b, t')) of source s's block into output at sequence position
  // s·seq/W + t'.
  void place(const Args& a, int s, const char* from, int64_t i0, int64_t i1) const;
  // Source s's rows into place from placed_[s]: those landed so far, or (wait) all of them.
  void take(const Args& a, int s, bool wait, const std::atomic<bool>* stop);
  std::size_t block() const { return static_cast<std::size_t>(dims_.rows) * row_; }

  Schedule schedule_;            // the current (or last) call's
  ops::UlyssesDims dims_{};      // the current call's
  std::size_t row_ = 0;          // bytes of a block's row (output dtype)
  std::vector<int64_t> placed_;  // rows of each source placed so far
  kernels::GemmWeight weight_;
  // a2a-out: the column block this rank computed for each rank t (at t * block); host peers read
  // it in place, the network sends it to other hosts' ranks.
  ops::A2aExchange a2a_;
};

}  // namespace fluxcpp::detail
