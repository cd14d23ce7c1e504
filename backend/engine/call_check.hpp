// Every backend call agrees what it is before a byte of its data moves. The engine serves
// several torch calls with one op (a barrier is a one-element sum; every reduction but the
// native sums is an AllGather; broadcast, scatter and gather are AllToAllSingle), and an op's
// own handshake compares only its sizes: without this check rank 0's barrier() would pair with
// rank 1's all_reduce of one float, and a MIN with a MAX. Each call's spec (the torch call, its
// ReduceOp, root, dtype, element count and list length) is gathered from every rank first (one
// small AllGather of a fixed 128-byte record, the calls' own op kept apart); a difference is
// Failure(INVALID_ARGUMENT) on every rank naming the calls in words ("the ranks' calls disagree
// (call 7 of the group): rank 0 called barrier(), rank 1 called allreduce(SUM, float32, 1
// element)"), the data ops untouched: the group stays usable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capi_call.hpp"

namespace fluxcpp::backend {

struct CallSpec {
  std::string name;     // the torch call ("allreduce", "broadcast", ...)
  std::string reduce;   // its ReduceOp ("SUM", ...), or ""
  std::string dtype;    // its element type ("float32", ...), or ""
  int64_t count = -1;   // elements every rank passes alike, or -1
  int64_t parts = -1;   // tensors of a list call, or -1
  int root = -1;        // the root rank, or -1
  // "allreduce(MIN, float32, 4 elements)", "broadcast(root 0, float32, 16 elements)".
  std::string words() const;
};

class CallCheck {
 public:
  // Reads the ranks' placement (fluxcpp_context_info) for carry_max(); throws Failure.
  CallCheck(fluxcpp_context_t ctx, int rank, int size);
  ~CallCheck();  // local: destroys the op (before the context goes)
  CallCheck(const CallCheck&) = delete;
  CallCheck& operator=(const CallCheck&) = delete;

  // Collective over the group: returns when every rank made the same call, else throws
  // Failure(FLUXCPP_ERROR_INVALID_ARGUMENT), the same on every rank. Names longer than the
  // record's fields are cut (the comparison too).
  void agree(const CallSpec& spec);
  // agree, with `bytes` of the call's data from every rank traveling beside the records (at most
  // carry_max()): a small call then needs no exchange of its own, one meeting of the ranks
  // instead of two (across hosts one network round trip instead of two). Returns rank t's bytes
  // at [t], valid until the next call. Data of different size classes (0, then powers of two
  // from 1 KiB, then carry_max()) on different ranks: the records alone are gathered once more;
  // calls that differ fail as in agree, and calls that agree (all_to_all's splits differ by
  // design) return an empty vector: the caller then runs the call's own exchange. `coarse`: the
  // classes 1 KiB, 16 KiB, then powers of two from 64 KiB (carry_max() the last) only, for calls
  // whose ranks' sizes differ by design.
  // kCarryBytes: a record and its data fill 64 KiB, the largest block that rides on the
  // AllGather's handshake on one host (a bf16 all_reduce of 32000 logits fits).
  static constexpr int64_t kCarryBytes = (int64_t{64} << 10) - 128;
  // The most a call carries: kCarryBytes, or across hosts of one rank each, where the
  // AllGather's payloads ride in its rail records (256 KiB / (hosts - 1) per rank), what a
  // record leaves of that, up to kHostsCarryBytes (128 KiB at two and three hosts), never below
  // kCarryBytes (from six hosts on the largest class no longer fits a rail record: the
  // AllGather then meets twice): a 64 KiB broadcast, all_reduce or reduce_scatter meets the peer
  // once on the link instead of twice. The same on every rank.
  // kHostsCarryBytes: every rank's data travels to every rank, where a broadcast needs the
  // root's alone and a reduce_scatter a block: over the shaped link carried calls in the 128 KiB
  // class tied with their own exchange (~200 µs), and the 256 KiB class took ~400 µs against
  // 200-370.
  static constexpr int64_t kHostsCarryBytes = int64_t{128} << 10;
  int64_t carry_max() const { return carry_max_; }
  const std::vector<const char*>& agree_carrying(const CallSpec& spec, const void* data,
                                                 int64_t bytes, bool coarse = false);

 private:
  fluxcpp_context_t ctx_;
  int rank_, size_;
  fluxcpp_all_gather_t op_ = nullptr;
  uint64_t calls_ = 0;
  int64_t carry_max_ = kCarryBytes;
  void compare(const char* all, std::size_t block) const;  // throws when the calls differ

  std::vector<char> mine_, all_;    // this rank's record and data; every rank's
  std::vector<const char*> blocks_;  // every rank's data in all_
};

}  // namespace fluxcpp::backend
