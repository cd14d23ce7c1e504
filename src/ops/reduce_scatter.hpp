// ReduceScatter (private part). See include/fluxcpp/reduce_scatter.hpp for the contract and
// docs/ops/reduce_scatter.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/reduce_scatter.hpp"
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

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
