// AGKernel (private part). See include/fluxcpp/ag_gemm.hpp for the contract and
// docs/ops/ag_gemm.md for the pipeline.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/ag_gemm.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/gather_exchange.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/gemm_op.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class AgGemmImpl : public ops::GemmOpBase<AgGemmImpl, AgGemmOptions> {
 public:
  static constexpr const char* kOp = "ag_gemm";
  using GemmOpBase::GemmOpBase;
  // The collective create (ops::make_op runs it). local_error: see ContextImpl.
  void create(ContextImpl& c, const std::string& local_error);

  using GemmOpBase::forward;
  // weight given packed (fluxcpp/packed_weight.hpp) instead of as it lies.
  void forward(const void* input, int64_t m, const kernels::PackedWeight& weight, const void* bias,
               void* output, void* gathered_input) {
    ops::GemmCall a = ops::GemmCall::fused(input, m, &weight, bias, output, gathered_input);
    a.packed = &weight;
    call(ops::Path::kFused, a);
  }

  // GemmOpBase's hooks.
  char* input_slot() { return gather_.staged_slot(); }
  std::size_t input_bytes(std::size_t m) const {
    return m / static_cast<std::size_t>(ctx_->world_size()) * in_row_;
  }
  void run(const ops::Call& call, const ops::GemmCall& a);
  void latency_payload(const ops::GemmCall& a, ops::CallDescriptor& d);
  AgGemmMode mode() const { return mode_; }
  // For tests that compare the two paths bit for bit: false sends every later call down the normal
  // path. Process-wide; set it alike on every rank, between calls.
  static void enable_latency_path(bool on) { latency_enabled_.store(on); }

 private:
  // C rows [0, rows) of the output block at `out` from A rows at `a`, over the compute workers,
  // in tiles with transfer progress in between while transfers are pending.
  // tiles = false: one call (over the compute workers), nothing in flight to progress.
  void gemm(const char* a, int64_t rows, const void* bias, char* out, bool tiles = true);
  // Whether a call with `rows` rows per rank gathers the host's rows before one GEMM.
  bool gathers(int64_t rows) const;
  // Whether a fused call of m rows takes the latency path (decided from agreed values: the same
  // on every rank), and that path's body: every host rank's rows came with the handshake.
  bool latency(int64_t m) const;
  void run_latency(const ops::GemmCall& a);

  static inline std::atomic<bool> latency_enabled_{true};
  AgGemmMode mode_ = AgGemmMode::kAuto;
  ops::GatherExchange gather_;
};

}  // namespace fluxcpp::detail
