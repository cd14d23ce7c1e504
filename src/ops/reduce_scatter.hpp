// ReduceScatter (private part). See include/fluxcpp/reduce_scatter.hpp for the contract and
// docs/ops/reduce_scatter.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/reduce_scatter.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/reduce_exchange.hpp"

namespace fluxcpp::detail {

class ReduceScatterImpl {
 public:
  // local_error: see ContextImpl.
  ReduceScatterImpl(std::shared_ptr<ContextImpl> ctx, const ReduceScatterOptions& options,
                    const std::string& local_error = {});

  void forward(const void* input, int64_t m, void* output);
  const ReduceScatterOptions& options() const { return opts_; }

 private:
  void run(const char* input, int64_t m, char* output);

  std::shared_ptr<ContextImpl> ctx_;
  ReduceScatterOptions opts_;
  DType acc_ = DType::kFloat32;  // accumulation dtype
  std::vector<char> host_sum_;   // this host's partial sum of our block (multi-host)
  shm::Layout layout_;
  ops::ReduceExchange reduce_;
  std::optional<ops::OpCore> core_;
};

}  // namespace fluxcpp::detail
