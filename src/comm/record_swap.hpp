// RecordSwap: one record per member of a communicator, swapped point to point in full, bounded by
// a deadline. The call handshake's exchange among the rail peers (one rank per host) rides on it:
// each member fills its own record, swap() sends it (or its head) to every other member and
// receives theirs into their records; a member late at the deadline gets a retraction (two words
// the caller chooses) after the record it already has, so that it fails when it arrives; and a
// small text per member can be gathered when some member has an error to tell. Owns a duplicate
// of the communicator (collective to make) and the records; what a timed-out swap posted keeps
// its own reference to the records it may still touch.
//
// Over the gloo channel (a context made from a store), the same swap runs on the op's rail slots
// among the members' world ranks. A member late at the deadline
// closes the channel (comm/gloo_net.hpp), so the late one fails when it arrives with no
// retraction needed.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/backoff.hpp"
#include "comm/bounded.hpp"
#include "comm/mpi_util.hpp"

namespace fluxcpp::comm {

class GlooNet;

class RecordSwap {
 public:
  RecordSwap() = default;
  // Collective over `base`: duplicates it. `what` names the exchange in the errors of later
  // creates on it (a timed-out swap's orphans).
  RecordSwap(MPI_Comm base, std::string what);
  // Over the gloo channel: `members` are the world ranks in member order, this rank is member
  // `me`; `serial` is the op's create serial (its slots). Not collective.
  RecordSwap(std::shared_ptr<GlooNet> net, std::vector<int> members, int me, uint64_t serial,
             std::string what);

  bool active() const { return comm_.get() != MPI_COMM_NULL || net_ != nullptr; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Makes the records `bytes` each (cache-line aligned), fresh when a timed-out swap may still
  // use the current ones. Call before filling this call's record.
  void prepare(std::size_t bytes);
  char* record(int member) const;
  std::size_t record_bytes() const { return bytes_; }

  // Sends this member's first `send_bytes` to every other member and receives up to a whole
  // record from each (a shorter message fills its start). Returns the members whose record did
  // not arrive by `deadline`; each of them is sent `retraction` after our record.
  std::vector<int> swap(std::size_t send_bytes, Deadline deadline, const BackoffPolicy& wait,
                        std::array<int64_t, 2> retraction);
  // The retractions that reached this member since the last swap: (member, its two words).
  std::vector<std::pair<int, std::array<int64_t, 2>>> retractions();
  // Every member's text (at most 511 bytes of `mine`); every member must call it. `missing`
  // words the timeout.
  std::vector<std::string> gather_texts(const std::string& mine, Deadline deadline,
                                        const BackoffPolicy& wait,
                                        const std::function<std::string()>& missing);

 private:
  struct Records;
  std::vector<int> swap_net(std::size_t send_bytes, Deadline deadline);
  std::vector<std::string> gather_texts_net(const std::string& mine, Deadline deadline,
                                            const std::function<std::string()>& missing);
  UniqueComm comm_;
  std::shared_ptr<GlooNet> net_;
  std::vector<int> members_;
  uint64_t serial_ = 0;
  std::string what_;
  int rank_ = 0, size_ = 1;
  std::size_t bytes_ = 0;
  std::shared_ptr<Records> records_;
};

}  // namespace fluxcpp::comm
