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
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

class AgGemmImpl {
 public:
  // local_error: see ContextImpl.
  AgGemmImpl(std::shared_ptr<ContextImpl> ctx, const AgGemmOptions& options,
             const std::string& local_error = {});

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output,
               void* gathered_input);
  void forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  void forward_comm_only(const void* input, int64_t m, void* gathered_input);
  const AgGemmOptions& options() const { return opts_; }
  AgGemmMode mode() const { return mode_; }

 private:
  enum class Path { kFused, kGemmOnly, kCommOnly };
  std::string validate(const void* input, int64_t m, const void* weight, const void* output,
                       Path path) const;
  void run(Path path, const char* input, int64_t m, const void* weight, const void* bias,
           char* output, char* gathered);
  // C rows [0, rows) of the output block at `out` from A rows at `a`, split over the compute
  // workers by column slabs.
  void gemm(const char* a, int64_t rows, const void* bias, char* out);
  // Whether a call with `rows` rows per rank gathers the host's rows before one GEMM.
  bool gathers(int64_t rows) const;

  std::shared_ptr<ContextImpl> ctx_;
  AgGemmOptions opts_;
  AgGemmMode mode_ = AgGemmMode::kAuto;
  std::size_t in_row_ = 0, out_row_ = 0;  // bytes per row of input and output
  kernels::GemmWeight weight_;
  std::vector<std::pair<int, int64_t>> host_runs_;  // (first world rank, ranks) per run
  std::vector<char> local_;  // copy mode and comm-only: the gathered rows, [max_m, k]
  std::optional<ops::BlockExchange> ex_;
};

}  // namespace fluxcpp::detail
