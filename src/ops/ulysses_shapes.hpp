// Shapes and checks shared by the two Ulysses ops (gemm_a2a_transpose, a2a_transpose_gemm).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "comm/parts.hpp"
#include "fluxcpp/types.hpp"
#include "ops/core/a2a_exchange.hpp"

namespace fluxcpp::ops {

// Shapes of one call: every rank holds `rows` = bs · seq/W rows of the exchanged layout, and the
// block between two ranks is `rows` x `cols` with cols = nheads/W · head_dim.
struct UlyssesDims {
  int64_t bs, seq, s_loc, rows, heads_loc, head_dim, cols;
};
UlyssesDims ulysses_dims(int W, int64_t bs, int64_t seq, int64_t nheads, int64_t head_dim);

// A call of either op, on any of its paths (what a path does not use is NULL).
struct UlyssesCall {
  const char* input;
  int64_t bs, seq;
  const void* weight;
  const void* bias;
  char* output;
};

// Create-time checks of both ops (collective); `gemm_n` x `gemm_k` is the GEMM each rank runs.
// `own`: the op's own name and value of the GEMM dimension it takes (hidden or n), agreed under
// that name before the generic checks. Sizes are checked before any product is formed.
void ulysses_check_create(const comm::Parts& c, const char* op, int64_t max_bs, int64_t max_seq,
                          int64_t nheads, int64_t head_dim, DType in, DType out,
                          std::pair<const char*, int64_t> own, bool own_is_k,
                          const std::string& local_error);

// Forward-time checks (local): "" or the message.
std::string ulysses_check_forward(
    const comm::Parts& c, const char* op, int64_t bs, int64_t seq, int64_t max_bs, int64_t max_seq,
    std::initializer_list<std::pair<const char*, const void*>> required);

}  // namespace fluxcpp::ops
