// AllReduce (private part). See include/fluxcpp/all_reduce.hpp for the contract and
// docs/ops/all_reduce.md for the algorithm.
#pragma once

#include <string>

#include "comm/parts.hpp"
#include "fluxcpp/all_reduce.hpp"
#include "ops/core/all_reduce_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class AllReduceImpl : public ops::OpBase<AllReduceOptions> {
 public:
  static constexpr const char* kOp = "all_reduce";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // How an AllReduce call runs, chosen by AllReduceImpl::plan from the call's count and the host
  // layout (agreed values: the same schedule, and bits, on every rank).
  enum class Schedule {
    kLatency,  // every rank's input rode on the handshake; every rank sums them all
    kChunks,   // each host rank sums one chunk of the host's inputs (and the hosts' sums), shared
  };

  void forward(const void* input, int64_t count, void* output);
  void* input_buffer() { return zero_copy_.acquire(*core_, reduce_.input_slot()); }

  // The schedule of a call of `count` elements, and the last call's.
  Schedule plan(int64_t count) const {
    return count > 0 && reduce_.one_shot(count) ? Schedule::kLatency : Schedule::kChunks;
  }
  Schedule last_schedule() const { return schedule_; }

 private:
  Schedule schedule_ = Schedule::kChunks;  // the current (or last) call's
  ops::AllReduceExchange reduce_;
  ops::ZeroCopyInput zero_copy_;
};

}  // namespace fluxcpp::detail
