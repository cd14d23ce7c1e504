// ShmGroup: a Group over one segment for the ranks of one host. The whole control plane of a
// context made from an id (context_shm.cpp) or from a store with one host; with several hosts
// (context_store.cpp) each host's node group, beside the GlooGroup across hosts. One segment
// holds a slot per rank; a collective is a round: each rank writes its bytes into its slot's
// half for the round's parity, publishes the round number, and waits until every slot shows it.
// A rank can be at most one round ahead of the slowest (it cannot finish a round before
// everyone published it), so the other half is never overwritten while read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/group.hpp"
#include "shm/segment.hpp"

namespace fluxcpp::comm {

class ShmGroup : public Group {
 public:
  // The rendezvous of rank `rank` of `size` through segment `name`, which rank 0 creates (the
  // others wait for it). Bounded by the current DeadlineScope: kTimeout naming the ranks that
  // did not arrive. kInvalidArgument when ranks pass different sizes, or two pass one rank (on
  // every rank waiting in the rendezvous). A rank that fails withdraws (the others wait for it
  // again), so the same process may retry while they wait; when rank 0 fails and retries, the
  // ranks still waiting meet it in its new segment.
  // Once every rank has mapped it, rank 0 removes the name: nothing is left in /dev/shm.
  // `secret` (at most 16 bytes, the id's): rank 0 writes it into the segment, the others accept
  // the segment only when it carries it (kInvalidUsage otherwise: a stale segment or another
  // process's under the name); a rank that fails never removes a name it did not create.
  ShmGroup(const std::string& name, int rank, int size, const std::string& secret = {});

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* mine, void* all, std::size_t bytes) override;
  void check_in(uint64_t token, const char* step,
                const std::function<int(int)>& name_of = {}) override;

  // Every rank's pid, exchanged at the rendezvous.
  const std::vector<long>& pids() const { return pids_; }

 private:
  struct Slot;
  Slot& slot(int r) const;
  // One attempt at the rendezvous in the segment now under `name` (throws Rejoin, inside the .cpp,
  // when rank 0 abandoned it for a retry).
  void join(const std::string& name, const char* secret);
  void check_rendezvous(bool past_deadline);
  // One round of at most a slot's bytes; kTimeout naming who is missing, in `step`.
  void round(const void* mine, void* all, std::size_t bytes, std::size_t stride, const char* step);

  shm::Segment seg_;
  int rank_ = 0, size_ = 1;
  uint64_t round_ = 0;
  bool rendezvous_ = false;  // in the first round: check_rendezvous while waiting
  std::string missing_at_rejoin_;  // the ranks missing when rank 0 gave up (for the timeout)
  std::vector<long> pids_;
};

}  // namespace fluxcpp::comm
