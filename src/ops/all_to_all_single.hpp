// All2AllSingle (private part). See include/fluxcpp/all_to_all_single.hpp for the contract and
// docs/ops/all_to_all_single.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/all_to_all_single.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/single_copy.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class AllToAllSingleImpl : public ops::OpBase<AllToAllSingleOptions> {
 public:
  static constexpr const char* kOp = "all_to_all_single";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const void* input, const int64_t* input_splits, void* output,
               const int64_t* output_splits);
  void* input_buffer() { return zero_copy_.acquire(*core_, a2a_.out_slot()); }

 private:
  std::string validate(const void* input, const int64_t* in_splits, const void* output,
                       const int64_t* out_splits) const;
  // Every rank's (input_splits, output_splits), agreed in the handshake, checked pair by pair:
  // the same verdict on every rank.
  std::string check_splits() const;
  // Rank s's splits of the current call, as agreed in the handshake.
  const int64_t* input_splits_of(int s) const { return core_->handshake().vector(s); }
  const int64_t* output_splits_of(int s) const {
    return core_->handshake().vector(s) + ctx_->topo().world_size();
  }
  // Across hosts of one rank each: whether every rank's input fits the handshake's payload room
  // (from the agreed splits: the same answer on every rank), so that it came whole with the
  // descriptors and no transfer follows.
  bool rides_on_handshake() const;
  void run(const char* input, bool zero_copy, char* output);

  std::size_t row_ = 0;   // bytes per row
  ops::A2aExchange a2a_;  // a2a-out holds the staged input (also the zero-copy input buffer)
  ops::SingleCopy single_copy_;
  ops::ZeroCopyInput zero_copy_;
};

}  // namespace fluxcpp::detail
