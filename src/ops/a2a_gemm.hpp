// All-to-all + GEMM (private part). See include/fluxcpp/a2a_gemm.hpp for the contract and
// docs/ops/a2a_gemm.md for the pipeline.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/a2a_gemm.hpp"
#include "kernels/gemm.hpp"
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

class A2aGemmImpl {
 public:
  // local_error: see ContextImpl.
  A2aGemmImpl(std::shared_ptr<ContextImpl> ctx, const A2aGemmOptions& options,
              const std::string& local_error = {});

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output,
               void* a2a_output);
  void forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  void forward_comm_only(const void* input, int64_t m, void* a2a_output);
  const A2aGemmOptions& options() const { return opts_; }

 private:
  enum class Path { kFused, kGemmOnly, kCommOnly };
  std::string validate(const void* input, int64_t m, const void* weight, const void* output,
                       Path path) const;
  void run(Path path, const char* input, int64_t m, const void* weight, const void* bias,
           char* output, char* a2a_output);

  std::shared_ptr<ContextImpl> ctx_;
  A2aGemmOptions opts_;
  std::size_t in_row_ = 0, out_row_ = 0;  // bytes per row of input and output
  kernels::GemmWeight weight_;
  std::vector<char> local_;  // gather mode: the exchanged rows, [max_m, k]
  // Slot 0: this rank's input staged block by block (block t at t * m/W rows), read in place by
  // host peers' GEMMs and sent by MPI; slot 1: the blocks received from other hosts (block s at
  // s * m/W rows). Extra signals: [0, W) "block for world rank t staged", [W, 2W) "block from
  // world rank s received".
  std::optional<ops::BlockExchange> ex_;
};

}  // namespace fluxcpp::detail
