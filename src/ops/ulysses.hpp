// Ulysses sequence-parallel ops (private part). See include/fluxcpp/ulysses.hpp for the contract
// and docs/ops/gemm_a2a_transpose.md, docs/ops/a2a_transpose_gemm.md for the pipelines.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/ulysses.hpp"
#include "kernels/gemm.hpp"
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

// Both ops exchange one equal block per (source, destination) pair. Segment slots: [0, W) the
// block this rank produced for world rank t; with several hosts also [W, 2W), the block received
// from world rank s by MPI. Extra signals: [0, W) progress of the block for t (host peers read it
// in place), [W, 2W) "block from s received".
class GemmA2aTransposeImpl {
 public:
  GemmA2aTransposeImpl(std::shared_ptr<ContextImpl> ctx, const GemmA2aTransposeOptions& options,
                       const std::string& local_error = {});

  void forward(const void* input, int64_t bs, int64_t seq, const void* weight, const void* bias,
               void* output);
  void forward_gemm_only(const void* input, int64_t bs, int64_t seq, const void* weight,
                         const void* bias);
  void forward_comm_only(int64_t bs, int64_t seq, void* output);
  const GemmA2aTransposeOptions& options() const { return opts_; }

 private:
  enum class Path { kFused, kGemmOnly, kCommOnly };
  void run(Path path, const char* input, int64_t bs, int64_t seq, const void* weight,
           const void* bias, char* output);

  std::shared_ptr<ContextImpl> ctx_;
  GemmA2aTransposeOptions opts_;
  kernels::GemmWeight weight_;
  std::optional<ops::BlockExchange> ex_;
};

class A2aTransposeGemmImpl {
 public:
  A2aTransposeGemmImpl(std::shared_ptr<ContextImpl> ctx, const A2aTransposeGemmOptions& options,
                       const std::string& local_error = {});

  void forward(const void* input, int64_t bs, int64_t seq, const void* weight, const void* bias,
               void* output, void* a2a_output);
  void forward_comm_only(const void* input, int64_t bs, int64_t seq, void* a2a_output);
  void forward_gemm_only(int64_t bs, int64_t seq, const void* weight, const void* bias,
                         void* output);
  const A2aTransposeGemmOptions& options() const { return opts_; }

 private:
  enum class Path { kFused, kGemmOnly, kCommOnly };
  void run(Path path, const char* input, int64_t bs, int64_t seq, const void* weight,
           const void* bias, char* output, char* a2a);

  std::shared_ptr<ContextImpl> ctx_;
  A2aTransposeGemmOptions opts_;
  kernels::GemmWeight weight_;
  std::vector<char> a2a_;  // the exchanged rows [max_bs * max_seq/W, nheads * head_dim]
  std::optional<ops::BlockExchange> ex_;
};

}  // namespace fluxcpp::detail
