// RecordSwap: one record per member of a rail (one rank per host), swapped point to point in
// full, bounded by a deadline. The call handshake's exchange among the rail peers rides on it:
// each member fills its own record, swap() sends it (or its head) to every other member and
// receives theirs into their records; a member late at the deadline must fail when it arrives
// (how is the network's: MPI sends it a retraction, two words the caller chooses, after the
// record it already has; gloo closes the channel); and a small text per member can be gathered
// when some member has an error to tell. What a timed-out swap posted keeps its own reference to
// the records it may still touch.
//
// The handshake keeps the one its context's Network made (comm/network.hpp), and calls it
// directly: MpiRecordSwap (comm/mpi_record_swap.hpp) or GlooRecordSwap
// (comm/gloo_record_swap.hpp). A handshake on one host has none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/backoff.hpp"
#include "comm/deadline_scope.hpp"

namespace fluxcpp::comm {

// One network's swap: the records and the texts' slots are common (here); swap, retractions (none
// unless the network sends them) and gather_texts are the network's.
class RecordSwap {
 public:
  explicit RecordSwap(std::string what) : what_(std::move(what)) {}
  virtual ~RecordSwap() = default;
  RecordSwap(const RecordSwap&) = delete;
  RecordSwap& operator=(const RecordSwap&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Makes the records `bytes` each (cache-line aligned), fresh when a timed-out swap may still
  // use the current ones. Call before filling this call's record.
  void prepare(std::size_t bytes);
  char* record(int member) const;
  std::size_t record_bytes() const { return bytes_; }
  // A record of this member's meant for `member` alone (Sends::parted), as large as a record.
  char* out_record(int member) const;

  // What a swap sends: this member's record's first `bytes` to every other member, or, when
  // `parted` has size() entries, out_record(m)'s first parted[m] bytes to member m (each member
  // its own part of this member's data: what is not theirs does not travel).
  struct Sends {
    std::size_t bytes = 0;
    std::vector<std::size_t> parted;
  };
  // Sends this member's record(s) (see Sends) and receives up to a whole record from each other
  // member (a shorter message fills its start). Returns the members whose record did not arrive
  // by `deadline`; each of them is told (see above) that this member gave up.
  virtual std::vector<int> swap(const Sends& sends, Deadline deadline, const BackoffPolicy& wait,
                                std::array<int64_t, 2> retraction) = 0;
  // The retractions that reached this member since the last swap: (member, its two words). None
  // where a late member finds the channel closed instead (gloo).
  virtual std::vector<std::pair<int, std::array<int64_t, 2>>> retractions() { return {}; }
  // Every member's text (at most 511 bytes of `mine`); every member must call it. `missing`
  // words the timeout.
  virtual std::vector<std::string> gather_texts(const std::string& mine, Deadline deadline,
                                                const BackoffPolicy& wait,
                                                const std::function<std::string()>& missing) = 0;

 protected:
  // Every member's record and this member's out records, cache-line aligned, and room for the
  // texts.
  struct Records {
    Records(std::size_t record, int members);
    char* all();
    char* outs();
    std::vector<char> text, texts;

   private:
    std::vector<char> all_, outs_;
  };
  // The bytes a swap sends member m, and from where.
  std::pair<const char*, std::size_t> send_of(const Sends& sends, int m) const;
  // A member's text in gather_texts travels in a slot of kText bytes: put_text writes `mine` into
  // one (at most kText - 1 bytes, zero-terminated); texts_of reads every member's from size()
  // slots in member order.
  static constexpr int kText = 512;
  static void put_text(const std::string& mine, char* slot);
  std::vector<std::string> texts_of(const char* slots) const;

  std::string what_;
  int rank_ = 0, size_ = 1;
  std::size_t bytes_ = 0;
  std::shared_ptr<Records> records_;
};

}  // namespace fluxcpp::comm
