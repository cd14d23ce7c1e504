// fluxcpp/ulysses.hpp: Ulysses sequence parallelism — the GEMM + all-to-all transpose before
// attention (GemmAllToAllTranspose) and the all-to-all transpose + GEMM after it
// (AllToAllTransposeGemm).
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct GemmA2aTransposeOptions {
  int64_t max_bs = 0;   // largest batch a forward may pass
  int64_t max_seq = 0;  // largest global sequence length a forward may pass
  int64_t hidden = 0;   // input features (the GEMM's k)
  int64_t nheads = 0;   // heads over all ranks; nheads % W == 0
  int64_t head_dim = 0;
  DType input_dtype = DType::kFloat32;  // input and weight
  DType output_dtype =
      DType::kFloat32;  // output and bias; pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
};

struct A2aTransposeGemmOptions {
  int64_t max_bs = 0;
  int64_t max_seq = 0;  // global sequence length
  int64_t nheads = 0;   // heads over all ranks; nheads % W == 0
  int64_t head_dim = 0;
  int64_t n = 0;                        // output features
  DType input_dtype = DType::kFloat32;  // input, weight and a2a_output
  DType output_dtype = DType::kFloat32;
};

namespace detail {
class GemmA2aTransposeImpl;
class A2aTransposeGemmImpl;
}  // namespace detail

class FLUXCPP_API GemmA2aTranspose {
 public:
  // Collective: validates (same options on every rank) and allocates. Errors on every rank.
  GemmA2aTranspose(const Context& ctx, const GemmA2aTransposeOptions& options);
  GemmA2aTranspose(GemmA2aTranspose&&) noexcept;
  GemmA2aTranspose& operator=(GemmA2aTranspose&&) noexcept;
  ~GemmA2aTranspose();

  // Collective, blocking. seq is the global sequence length; seq % W == 0. input
  // [bs, seq/W, hidden] (this rank's sequence slice); weight [nheads·head_dim, hidden]; bias
  // [nheads·head_dim] or null. With y_s = input_s · weightᵀ + bias on rank s, output
  // [bs, nheads/W, seq, head_dim] is output_r[b][h][t][d] =
  // y_{t / (seq/W)}[b][t % (seq/W)][(r·nheads/W + h)·head_dim + d]. bs == 0 is a no-op.
  // Each rank computes the head-group column blocks meant for its peers first, in ring order,
  // publishing each; peers transpose them in while later blocks are still being computed.
  void forward(const void* input, int64_t bs, int64_t seq, const void* weight, const void* bias,
               void* output);

  // Benchmark paths. gemm-only (local): the GEMM blocks alone, into the op's buffers.
  // comm-only (collective): the all-to-all transpose of the blocks those buffers hold.
  void forward_gemm_only(const void* input, int64_t bs, int64_t seq, const void* weight,
                         const void* bias);
  void forward_comm_only(int64_t bs, int64_t seq, void* output);

  const GemmA2aTransposeOptions& options() const;

 private:
  std::unique_ptr<detail::GemmA2aTransposeImpl> impl_;
};

class FLUXCPP_API A2aTransposeGemm {
 public:
  A2aTransposeGemm(const Context& ctx, const A2aTransposeGemmOptions& options);
  A2aTransposeGemm(A2aTransposeGemm&&) noexcept;
  A2aTransposeGemm& operator=(A2aTransposeGemm&&) noexcept;
  ~A2aTransposeGemm();

  // Collective, blocking. input [bs, nheads/W, seq, head_dim] (this rank's heads, the whole
  // sequence); weight [n, nheads·head_dim]; bias [n] or null. a2a_output
  // [bs, seq/W, nheads·head_dim] or null, with a2a_output_r[b][t][(s·nheads/W + h)·head_dim + d]
  // = input_s[b][h][r·seq/W + t][d]; output [bs, seq/W, n] = a2a_output · weightᵀ + bias.
  // Row tiles of the GEMM start as soon as every rank's slices of those rows have landed.
  void forward(const void* input, int64_t bs, int64_t seq, const void* weight, const void* bias,
               void* output, void* a2a_output = nullptr);

  // Benchmark paths. comm-only (collective): the all-to-all transpose alone, into the op's
  // buffer (and a2a_output when not null). gemm-only (local): the GEMM over that buffer.
  void forward_comm_only(const void* input, int64_t bs, int64_t seq, void* a2a_output = nullptr);
  void forward_gemm_only(int64_t bs, int64_t seq, const void* weight, const void* bias,
                         void* output);

  const A2aTransposeGemmOptions& options() const;

 private:
  std::unique_ptr<detail::A2aTransposeGemmImpl> impl_;
};

}  // namespace fluxcpp
