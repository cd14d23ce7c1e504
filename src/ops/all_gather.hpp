// AllGather (private part). See include/fluxcpp/all_gather.hpp for the contract and
// docs/ops/all_gather.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/context_impl.hpp"
#include "fluxcpp/all_gather.hpp"
#include "ops/core/gather_exchange.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/single_copy.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class AllGatherImpl {
 public:
  // local_error: see ContextImpl.
  AllGatherImpl(std::shared_ptr<ContextImpl> ctx, const AllGatherOptions& options,
                const std::string& local_error = {});

  void forward(const void* input, int64_t m, void* output);
  void* input_buffer() { return zero_copy_.acquire(*core_, gather_.staged_slot()); }
  const AllGatherOptions& options() const { return opts_; }

 private:
  void run(const char* input, bool zero_copy, std::size_t shard, char* output);
  void gather_cma(const char* input, bool zero_copy, std::size_t shard, char* output);
  void gather_shm(const char* input, bool zero_copy, std::size_t shard, char* output);

  std::shared_ptr<ContextImpl> ctx_;
  AllGatherOptions opts_;
  std::size_t row_ = 0;  // bytes per row
  shm::Layout layout_;
  ops::GatherExchange gather_;
  ops::SingleCopy single_copy_;
  std::optional<ops::OpCore> core_;
  ops::ZeroCopyInput zero_copy_;
};

}  // namespace fluxcpp::detail
