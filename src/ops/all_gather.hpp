// AllGather (private part). See include/fluxcpp/all_gather.hpp for the contract and
// docs/ops/all_gather.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/context_impl.hpp"
#include "fluxcpp/all_gather.hpp"
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

class AllGatherImpl {
 public:
  // local_error: see ContextImpl.
  AllGatherImpl(std::shared_ptr<ContextImpl> ctx, const AllGatherOptions& options,
                const std::string& local_error = {});

  void forward(const void* input, int64_t m, void* output);
  const AllGatherOptions& options() const { return opts_; }

 private:
  std::string validate(const void* input, int64_t m, const void* output) const;
  void run(const char* input, int64_t m, char* output);
  void gather_cma(const char* input, std::size_t shard, char* output);
  void gather_shm(const char* input, std::size_t shard, char* output, bool prestaged);

  std::shared_ptr<ContextImpl> ctx_;
  AllGatherOptions opts_;
  // extra_signal(owner, q): node rank q finished its single-copy read of owner's input, as
  // 2*epoch (+1 if the read failed).
  std::optional<ops::BlockExchange> ex_;
};

}  // namespace fluxcpp::detail
