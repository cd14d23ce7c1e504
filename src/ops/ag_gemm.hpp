// AGKernel (private part). See include/fluxcpp/ag_gemm.hpp for the contract and
// docs/ops/ag_gemm.md for the pipeline.
#pragma once

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
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class AgGemmImpl : public ops::OpBase<AgGemmOptions> {
 public:
  static constexpr const char* kOp = "ag_gemm";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ContextImpl.
  void create(ContextImpl& c, const std::string& local_error);

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output,
               void* gathered_input);
  // weight given packed (fluxcpp/packed_weight.hpp) instead of as it lies.
  void forward(const void* input, int64_t m, const kernels::PackedWeight& weight, const void* bias,
               void* output, void* gathered_input);
  void forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  void forward_comm_only(const void* input, int64_t m, void* gathered_input);
  void* input_buffer() { return zero_copy_.acquire(*core_, gather_.staged_slot()); }
  AgGemmMode mode() const { return mode_; }

 private:
  void call(ops::Path path, const ops::GemmCall& a);
  void run(const ops::Call& call, const ops::GemmCall& a);
  // Publishes our rows: host peers read them from our segment, MPI sends them from there.
  void stage(const ops::Call& call, const ops::GemmCall& a, std::size_t blk);
  // C rows [0, rows) of the output block at `out` from A rows at `a`, over the compute workers,
  // in tiles with transfer progress in between while transfers are pending.
  // tiles = false: one call (over the compute workers), nothing in flight to progress.
  void gemm(const char* a, int64_t rows, const void* bias, char* out, bool tiles = true);
  // Whether a call with `rows` rows per rank gathers the host's rows before one GEMM.
  bool gathers(int64_t rows) const;

  AgGemmMode mode_ = AgGemmMode::kAuto;
  std::size_t in_row_ = 0, out_row_ = 0;  // bytes per row of input and output
  kernels::GemmWeight weight_;
  std::vector<std::pair<int, int64_t>> host_runs_;  // (first world rank, ranks) per run
  std::vector<char> local_;  // gather mode and comm-only: the gathered rows, [max_m, k]
  ops::GatherExchange gather_;
  ops::ZeroCopyInput zero_copy_;
};

}  // namespace fluxcpp::detail
