// GemmAR (private part). See include/fluxcpp/gemm_ar.hpp for the contract and docs/ops/gemm_ar.md
// for the algorithm.
#pragma once

#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/gemm_ar.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/all_reduce_exchange.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/op_base.hpp"

namespace fluxcpp::detail {

class GemmArImpl : public ops::OpBase<GemmArOptions> {
 public:
  static constexpr const char* kOp = "gemm_ar";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // How a GemmAR call runs, chosen by GemmArImpl::plan from the call's m, the op's settings and
  // the host layout (agreed values: the same schedule, and bits, on every rank).
  enum class Schedule {
    kLatency,  // the partial computed straight into the handshake payload; every rank sums them
    kWhole,    // the partial in one GEMM, then the all-reduce
    kHalves,  // alone on the host across hosts: the first half crosses while the second is computed
  };

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output);
  void forward(const void* input, int64_t m, const kernels::PackedWeight& weight, const void* bias,
               void* output);

  // The schedule of a call of m rows, and the last call's.
  Schedule plan(int64_t m) const;
  Schedule last_schedule() const { return schedule_; }

 private:
  void call(const ops::GemmCall& a);
  // The latency path's payload: this rank's partial.
  void latency_payload(const ops::GemmCall& a, ops::CallDescriptor& d);
  // The all-reduce of the partial, produced in `tile` rows a step; streamed: each step as the
  // all-reduce asks for it (kHalves), else all before it starts (kWhole).
  void run(const ops::GemmCall& a, int64_t tile, bool streamed);
  // This rank's partial product [m, n] into `partial` (accumulation dtype).
  void gemm(const char* input, int64_t m, const void* bias, char* partial);

  DType acc_ = DType::kFloat32;
  kernels::GemmWeight weight_;
  Schedule schedule_ = Schedule::kWhole;  // the current (or last) call's
  std::vector<char> bias_acc_;            // bias widened to the accumulation dtype
  // Its input slot holds this rank's partial product [m, n] in the accumulation dtype.
  ops::AllReduceExchange reduce_;
};

}  // namespace fluxcpp::detail
