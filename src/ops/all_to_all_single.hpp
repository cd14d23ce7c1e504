// All2AllSingle (private part). See include/fluxcpp/all_to_all_single.hpp for the contract and
// docs/ops/all_to_all_single.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "fluxcpp/all_to_all_single.hpp"
#include "ops/block_exchange.hpp"

namespace fluxcpp::detail {

class AllToAllSingleImpl {
 public:
  // local_error: see ContextImpl.
  AllToAllSingleImpl(std::shared_ptr<ContextImpl> ctx, const AllToAllSingleOptions& options,
                     const std::string& local_error = {});

  void forward(const void* input, const int64_t* input_splits, void* output,
               const int64_t* output_splits);
  const AllToAllSingleOptions& options() const { return opts_; }

 private:
  std::string validate(const void* input, const int64_t* in_splits, const void* output,
                       const int64_t* out_splits) const;
  // Every rank's (input_splits, output_splits) of this call, checked pair by pair: the same
  // verdict on every rank. Returns the split matrix S[s][t] = rows rank s sends to rank t.
  std::vector<int64_t> agree_splits(const int64_t* in_splits, const int64_t* out_splits);
  void run(const char* input, char* output, const std::vector<int64_t>& S);

  std::shared_ptr<ContextImpl> ctx_;
  AllToAllSingleOptions opts_;
  std::size_t row_ = 0;  // bytes per row
  // Slot 0: the staged input (what host peers read and MPI sends), slot 1: rows received from
  // other hosts. Extra signals: [0, W) "rows for world rank t staged", [W, 2W) "rows from world
  // rank s received by MPI", [2W, 2W + L] the single-copy done marks. Scratch: this call's
  // splits, [parity][in, out][W].
  std::optional<ops::BlockExchange> ex_;
};

}  // namespace fluxcpp::detail
