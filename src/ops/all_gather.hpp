// AllGather (private part). See include/fluxcpp/all_gather.hpp for the contract and
// docs/ops/all_gather.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/parts.hpp"
#include "fluxcpp/all_gather.hpp"
#include "ops/core/gather_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/single_copy.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class AllGatherImpl : public ops::OpBase<AllGatherOptions> {
 public:
  static constexpr const char* kOp = "all_gather";
  // On one host, the largest block that rides on the handshake: past it two copies (into the
  // payload slot, out of it) cost more than the single copy's or the staged path's extra meeting.
  static constexpr std::size_t kHostLatencyBytes = 64 << 10;
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // How an AllGather call gathers the host's blocks, chosen by AllGatherImpl::plan from the call's
  // block size and what create probed (agreed values: the same schedule on every rank). The other
  // hosts' blocks come through the network channel either way.
  enum class Schedule {
    kSingleCopy,  // each peer's input read straight from its address space (one copy)
    kStaged,      // blocks staged in the segments chunk by chunk, peers pulling each as it lands
    kLatency,  // a small block rides on the handshake (on one host in its payload slots,
               // across hosts of one rank each in its rail records): one exchange, no transfer
               // or release after it
  };

  void forward(const void* input, int64_t m, void* output);
  void* input_buffer() { return zero_copy_.acquire(*core_, gather_.staged_slot()); }

  // The schedule of a call of m rows, and the last call's.
  Schedule plan(int64_t m) const;
  Schedule last_schedule() const { return schedule_; }

 private:
  void run(const char* input, bool zero_copy, std::size_t shard, char* output);
  void gather_cma(const char* input, bool zero_copy, std::size_t shard, char* output);
  void gather_shm(const char* input, bool zero_copy, std::size_t shard, char* output);

  std::size_t row_ = 0;                    // bytes per row
  Schedule schedule_ = Schedule::kStaged;  // the current (or last) call's
  ops::GatherExchange gather_;
  ops::SingleCopy single_copy_;
  ops::ZeroCopyInput zero_copy_;
};

}  // namespace fluxcpp::detail
