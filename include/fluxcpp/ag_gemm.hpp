// fluxcpp/ag_gemm.hpp: AGKernel — all-gather fused with GEMM (column-parallel linear).
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/packed_weight.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

// How a rank's GEMM reads the rows of other ranks of its host.
enum class AgGemmMode : int {
  kAuto = 0,      // FLUXCPP_AG_GEMM_MODE, else per call: copy when n >= m/W, else zero_copy
  kZeroCopy = 1,  // own rows first, then each peer's rows straight from its segment, as they land
  kCopy = 2,      // gather the host's rows into one local buffer first, then one GEMM over them
};

struct AgGemmOptions {
  int64_t max_m = 0;                    // largest total row count a forward may pass
  int64_t n = 0;                        // output columns (this rank's shard of the weight)
  int64_t k = 0;                        // reduction dimension
  DType input_dtype = DType::kFloat32;  // input, weight (and gathered_input)
  DType output_dtype =
      DType::kFloat32;            // output and bias; pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
  bool transpose_weight = false;  // weight is [k, n] instead of [n, k]
  AgGemmMode mode = AgGemmMode::kAuto;
};

namespace detail {
class AgGemmImpl;
}

class FLUXCPP_API AgGemm {
 public:
  // Collective: validates (every rank must pass the same options) and allocates the symmetric
  // buffers. Errors are raised on every rank.
  AgGemm(const Context& ctx, const AgGemmOptions& options);
  AgGemm(AgGemm&&) noexcept;
  AgGemm& operator=(AgGemm&&) noexcept;
  ~AgGemm();  // noexcept; never communicates

  // Collective, blocking. input [m/W, k] (this rank's rows); weight [n, k] ([k, n] when
  // transposed); bias [n] in the output dtype or null (added once); output [m, n] =
  // AllGather(input) · weightᵀ + bias; gathered_input [m, k] or null receives AllGather(input).
  // m % W == 0, m <= max_m, same m on every rank; m == 0 is a no-op. Accumulation is f32 for
  // bf16 and f32 inputs, f64 for f64. Inputs may be reused once forward returns.
  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output,
               void* gathered_input = nullptr);
  // The same with the weight packed once (fluxcpp/packed_weight.hpp): its dtype, n, k and
  // orientation must match the options (INVALID_ARGUMENT on every rank otherwise).
  void forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
               void* output, void* gathered_input = nullptr);

  // Benchmark paths. gemm-only (local, not collective): the same GEMMs as a forward over the rows
  // already in place — no handshake, waits or copies. In zero-copy mode the own rows come from
  // `input` and other ranks' rows from the segments; in copy mode all rows (own included) come
  // from the gather buffer of the last forward, and `input` is only checked. comm-only
  // (collective): the all-gather alone, into gathered_input (or an internal buffer when null).
  void forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  void forward_comm_only(const void* input, int64_t m, void* gathered_input = nullptr);

  // Zero-copy input (not collective): waits until every peer has finished reading this rank's
  // slot for the previous forward (kTimeout naming the peer otherwise) and returns it: room for
  // max_m/W rows of k input elements. Write this call's input there and pass it to forward as
  // `input`: forward then skips copying it. Call it again before each write.
  void* input_buffer();

  const AgGemmOptions& options() const;

 private:
  std::unique_ptr<detail::AgGemmImpl> impl_;
};

}  // namespace fluxcpp
