#include "kernels/moe_layout_kernel.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "error_util.hpp"

namespace fluxcpp {
namespace kernels {
namespace {
constexpr const char* kOp = "moe_layout";
}  // namespace

void check_moe_layout_shape(int64_t num_tokens, int64_t topk, int64_t num_experts,
                            int64_t num_ranks) {
  FLUXCPP_CHECK_ARG(num_tokens >= 0, "{}: num_tokens={} must be >= 0", kOp, num_tokens);
  FLUXCPP_CHECK_ARG(topk >= 1, "{}: topk={} must be >= 1", kOp, topk);
  FLUXCPP_CHECK_ARG(num_experts >= 1 && num_experts <= INT32_MAX,
                    "{}: num_experts={} must be in [1, INT32_MAX] (expert ids are int32)", kOp,
                    num_experts);
  FLUXCPP_CHECK_ARG(num_ranks >= 1, "{}: num_ranks={} must be >= 1", kOp, num_ranks);
  FLUXCPP_CHECK_ARG(num_experts % num_ranks == 0,
                    "{}: num_experts={} is not divisible by num_ranks={}", kOp, num_experts,
                    num_ranks);
  // Divided rather than multiplied, so that the check itself cannot overflow.
  FLUXCPP_CHECK_ARG(num_tokens <= INT32_MAX / topk,
                    "{}: num_tokens={} x topk={} slots exceed INT32_MAX={} (per-slot indices are "
                    "int32)",
                    kOp, num_tokens, topk, INT32_MAX);
}

void moe_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t topk, int64_t num_experts,
                int64_t num_ranks, const MoeLayoutOutputs& out) {
  check_moe_layout_shape(num_tokens, topk, num_experts, num_ranks);
  const int64_t T = num_tokens, K = topk, E = num_experts, R = num_ranks, L = E / R;
  FLUXCPP_CHECK_ARG(topk_ids != nullptr || T == 0, "{}: topk_ids is NULL with num_tokens={}", kOp,
                    T);
  FLUXCPP_CHECK_ARG(out.expert_counts != nullptr, "{}: expert_counts is NULL", kOp);
  const int64_t slots = T * K;

  // Pass 1: validate and count into private memory, so that bad input leaves the outputs as
  // they were.
  std::vector<int64_t> cursor(static_cast<std::size_t>(E), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t e = topk_ids[s];
    if (e < 0 || e >= E) {
      FLUXCPP_CHECK_ARG(e == -1, "{}: topk_ids[t={}][k={}]={} is not in [-1, num_experts={})", kOp,
                        s / K, s % K, e, E);
      continue;
    }
    ++cursor[static_cast<std::size_t>(e)];
  }

  std::copy(cursor.begin(), cursor.end(), out.expert_counts);
  int64_t rows = 0;  // M when the loop is done
  for (int64_t q = 0; q < R; ++q) {
    int64_t own = 0;
    for (int64_t l = 0; l < L; ++l) {
      int64_t& c = cursor[static_cast<std::size_t>(q * L + l)];
      own += c;
      // The cursor of an expert starts at its first row, P[e].
      const int64_t count = c;
      c = rows;
      rows += count;
    }
    if (out.rank_rows != nullptr) out.rank_rows[q] = own;
  }

  const bool placing =
      out.scatter_index != nullptr || out.gather_index != nullptr || out.topk_index != nullptr;
  if (!placing && out.rank_tokens == nullptr) return;

  // Pass 2: slots in flat order t·K + k, so each expert's rows come out sorted by (t, k).
  // last_token[q]: the last token counted for rank q (a token counts once per rank).
  std::vector<int64_t> last_token;
  if (out.rank_tokens != nullptr) {
    std::fill(out.rank_tokens, out.rank_tokens + R, int64_t{0});
    last_token.assign(static_cast<std::size_t>(R), -1);
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t s = t * K + k;
      const int32_t e = topk_ids[s];
      if (e < 0) {
        if (out.scatter_index != nullptr) out.scatter_index[s] = -1;
        continue;
      }
      if (out.rank_tokens != nullptr) {
        const auto q = static_cast<std::size_t>(e / L);
        if (last_token[q] != t) {
          last_token[q] = t;
          ++out.rank_tokens[q];
        }
      }
      if (!placing) continue;
      const auto row = static_cast<int32_t>(cursor[static_cast<std::size_t>(e)]++);
      if (out.scatter_index != nullptr) out.scatter_index[s] = row;
      if (out.gather_index != nullptr) out.gather_index[row] = static_cast<int32_t>(t);
      if (out.topk_index != nullptr) out.topk_index[row] = static_cast<int32_t>(k);
    }
  }
  if (out.gather_index != nullptr) std::fill(out.gather_index + rows, out.gather_index + slots, -1);
  if (out.topk_index != nullptr) std::fill(out.topk_index + rows, out.topk_index + slots, -1);
}

}  // namespace kernels

void moe_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t topk, int64_t num_experts,
                int64_t num_ranks, const MoeLayoutOutputs& out) {
  kernels::moe_layout(topk_ids, num_tokens, topk, num_experts, num_ranks, out);
}

MoeLayout moe_layout(const int32_t* topk_ids, int64_t num_tokens, int64_t topk, int64_t num_experts,
                     int64_t num_ranks) {
  kernels::check_moe_layout_shape(num_tokens, topk, num_experts, num_ranks);
  const auto slots = static_cast<std::size_t>(num_tokens * topk);
  MoeLayout r;
  r.expert_counts.resize(static_cast<std::size_t>(num_experts));
  r.rank_rows.resize(static_cast<std::size_t>(num_ranks));
  r.rank_tokens.resize(static_cast<std::size_t>(num_ranks));
  r.scatter_index.resize(slots);
  r.gather_index.resize(slots);
  r.topk_index.resize(slots);
  kernels::moe_layout(topk_ids, num_tokens, topk, num_experts, num_ranks,
                      {r.expert_counts.data(), r.rank_rows.data(), r.rank_tokens.data(),
                       r.scatter_index.data(), r.gather_index.data(), r.topk_index.data()});
  return r;
}

}  // namespace fluxcpp
