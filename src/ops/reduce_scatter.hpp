// ReduceScatter (private part). See include/fluxcpp/reduce_scatter.hpp for the contract and
// docs/ops/reduce_scatter.md for the algorithm.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/reduce_scatter.hpp"
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

// The reduction shared by ReduceScatter and GemmRS, over a BlockExchange with W + 2N slots
// (slots [W, W+N): this host's sums to send to host n; [W+N, W+2N): sums received from host n).
// share(q, t) returns host rank q's share of row block t (waiting for it if needed). Sums in a
// fixed order — the host's ranks in host_sum_order, then hosts by index — accumulating in `acc`
// and rounding once into `output` (count elements of out_dtype). host_sum: count elements of acc
// scratch (multi-host only).
// The i-th host rank (local rank) whose share the rank with local rank `me` adds, i in [0, L):
// the others counting down from me-1, then itself (its own share last).
int host_sum_order(int me, int L, int i);

void reduce_row_blocks(ContextImpl& c, ops::BlockExchange& ex, DType share_dtype, DType acc,
                       DType out_dtype, int64_t count,
                       const std::function<const void*(int q, int t)>& share, void* host_sum,
                       void* output);

class ReduceScatterImpl {
 public:
  // local_error: see ContextImpl.
  ReduceScatterImpl(std::shared_ptr<ContextImpl> ctx, const ReduceScatterOptions& options,
                    const std::string& local_error = {});

  void forward(const void* input, int64_t m, void* output);
  const ReduceScatterOptions& options() const { return opts_; }

 private:
  std::string validate(const void* input, int64_t m, const void* output) const;
  void run(const char* input, int64_t m, char* output);

  std::shared_ptr<ContextImpl> ctx_;
  ReduceScatterOptions opts_;
  DType acc_ = DType::kFloat32;  // accumulation dtype
  std::vector<char> host_sum_;   // this host's partial sum of our block (multi-host)
  // Slots: [0, W) row block t staged for whoever reduces it on this host; [W, W+N) our host's
  // sum for the rank with our local rank on host n (sent by MPI); [W+N, W+2N) such sums received
  // from host n.
  std::optional<ops::BlockExchange> ex_;
};

}  // namespace fluxcpp::detail
