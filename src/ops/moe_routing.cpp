#include "ops/moe_routing.hpp"

#include <algorithm>

#include "error_util.hpp"
#include "kernels/moe_layout_kernel.hpp"
#include "ops/core/options.hpp"

namespace fluxcpp::ops {

int64_t check_moe_create(const comm::Parts& c, const char* op, const MoeShape& s,
                         const std::string& local_error) {
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  int64_t capacity = s.max_recv_rows;
  const DType in = s.input_dtype, out = s.output_dtype;
  agree_options(
      c, op, local_error,
      {dtype("input dtype", in), dtype("output dtype", out), count("max_tokens", s.max_tokens),
       dim("hidden", s.hidden), dim("topk", s.topk), dim("num_experts", s.num_experts, INT32_MAX),
       count("max_recv_rows", s.max_recv_rows)},
      [&] {
        FLUXCPP_CHECK_ARG(in == out || (in == DType::kBFloat16 && out == DType::kFloat32),
                          "{}: dtypes ({}, {}) are not one of (f32, f32), (f64, f64), (bf16, "
                          "bf16), (bf16, f32) (rank {})",
                          op, dtype_name(in), dtype_name(out), r);
        FLUXCPP_CHECK_ARG(s.num_experts % W == 0,
                          "{}: num_experts={} is not divisible by the world size {} (rank {})", op,
                          s.num_experts, W, r);
        FLUXCPP_CHECK_ARG(s.max_tokens <= INT32_MAX / s.topk,
                          "{}: max_tokens={} x topk={} slots exceed INT32_MAX (per-slot indices "
                          "are int32; rank {})",
                          op, s.max_tokens, s.topk, r);
        if (capacity == 0) capacity = W * s.max_tokens * s.topk;
        // Byte sizes of the segment and of caller buffers must stay far from overflow.
        constexpr int64_t kMaxBytes = int64_t{1} << 42;
        const int64_t row =
            s.hidden * static_cast<int64_t>(std::max(dtype_size(in), dtype_size(out)));
        FLUXCPP_CHECK_ARG(s.hidden <= kMaxBytes / 16 && capacity <= kMaxBytes / (row + 16) &&
                              s.max_tokens * s.topk <= kMaxBytes / (row + 16),
                          "{}: max_tokens={}, topk={}, hidden={}, max_recv_rows={} are too large "
                          "(rank {})",
                          op, s.max_tokens, s.topk, s.hidden, capacity, r);
      });
  return capacity;
}

std::string own_layout(const char* op, int rank, const int32_t* topk_ids, int64_t num_tokens,
                       int64_t topk, int64_t num_experts, int64_t num_ranks, int64_t* counts,
                       int32_t* scatter_index, int32_t* gather_index, int32_t* topk_index) {
  try {
    kernels::moe_layout(topk_ids, num_tokens, topk, num_experts, num_ranks,
                        {counts, nullptr, nullptr, scatter_index, gather_index, topk_index});
  } catch (const Error& e) {
    return fmt::format("{}: {} (rank {})", op, e.what(), rank);
  }
  return {};
}

MoeRouting::MoeRouting(int world_size, int64_t num_experts, int rank)
    : W_(world_size), r_(rank), E_(num_experts), L_(num_experts / world_size) {
  const auto W = static_cast<std::size_t>(W_), L = static_cast<std::size_t>(L_);
  c_.assign(W * static_cast<std::size_t>(E_), 0);
  rows_.assign(W * W, 0);
  recv_.assign(W, 0);
  recv_count_.assign(L, 0);
  dest_.assign(W * L, 0);
  block_.assign(W * L, 0);
}

void MoeRouting::build(const std::function<const int64_t*(int s)>& counts) {
  for (int s = 0; s < W_; ++s) {
    const int64_t* c = counts(s);
    std::copy(c, c + E_, c_.begin() + static_cast<std::ptrdiff_t>(s * E_));
  }
  std::fill(recv_.begin(), recv_.end(), 0);
  for (int s = 0; s < W_; ++s)
    for (int q = 0; q < W_; ++q) {
      int64_t n = 0;
      for (int64_t l = 0; l < L_; ++l) n += count(s, q * L_ + l);
      rows_[static_cast<std::size_t>(s) * W_ + q] = n;
      recv_[q] += n;
    }
  // This rank's receive order: (l, s, t, k).
  int64_t row = 0;
  for (int64_t l = 0; l < L_; ++l) {
    const int64_t e = r_ * L_ + l;
    recv_count_[l] = 0;
    for (int s = 0; s < W_; ++s) {
      dest_[static_cast<std::size_t>(s) * L_ + l] = row;
      row += count(s, e);
      recv_count_[l] += count(s, e);
    }
  }
  for (int s = 0; s < W_; ++s) {
    int64_t b = 0;
    for (int64_t l = 0; l < L_; ++l) {
      block_[static_cast<std::size_t>(s) * L_ + l] = b;
      b += count(s, r_ * L_ + l);
    }
  }
}

std::vector<int64_t> expert_prefix(const int64_t* counts, int64_t num_experts) {
  std::vector<int64_t> p(static_cast<std::size_t>(num_experts) + 1, 0);
  for (int64_t e = 0; e < num_experts; ++e) p[e + 1] = p[e] + counts[e];
  return p;
}

}  // namespace fluxcpp::ops
