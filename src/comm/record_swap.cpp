#include "comm/record_swap.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "comm/gloo_net.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {
constexpr int kRecordTag = 1;   // (the swap's own communicator)
constexpr int kRetractTag = 2;  // "I gave this swap up", after the record
constexpr int kText = 512;
constexpr std::size_t kLine = 64;
std::size_t round_up(std::size_t bytes) {
  return (bytes + kLine - 1) / kLine * kLine;
}
}  // namespace

struct RecordSwap::Records {
  Records(std::size_t record, int members)
      : all_(record * static_cast<std::size_t>(members) + kLine) {}
  char* all() {
    return reinterpret_cast<char*>(round_up(reinterpret_cast<std::uintptr_t>(all_.data())));
  }
  std::vector<char> text, texts;

 private:
  std::vector<char> all_;
};

RecordSwap::RecordSwap(MPI_Comm base, std::string what)
    : comm_(dup(base)), what_(std::move(what)) {
  check_mpi(MPI_Comm_rank(comm_.get(), &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_.get(), &size_), "MPI_Comm_size");
}

RecordSwap::RecordSwap(std::shared_ptr<GlooNet> net, std::vector<int> members, int me,
                       uint64_t serial, std::string what)
    : net_(std::move(net)),
      members_(std::move(members)),
      serial_(serial),
      what_(std::move(what)),
      rank_(me),
      size_(static_cast<int>(members_.size())) {}

void RecordSwap::prepare(std::size_t bytes) {
  bytes = round_up(bytes);
  // A timed-out swap's orphans may still use the records: never reuse those.
  if (!records_ || records_.use_count() > 1 || bytes != bytes_) {
    records_ = std::make_shared<Records>(bytes, size_);
    bytes_ = bytes;
  }
}

char* RecordSwap::record(int member) const {
  return records_->all() + bytes_ * static_cast<std::size_t>(member);
}

std::vector<int> RecordSwap::swap(std::size_t send_bytes, Deadline deadline,
                                  const BackoffPolicy& wait, std::array<int64_t, 2> retraction) {
  if (net_) return swap_net(send_bytes, deadline);
  const MPI_Comm c = comm_.get();
  std::vector<int> peers;  // every other member, starting after this one
  for (int i = 1; i < size_; ++i) peers.push_back((rank_ + i) % size_);
  std::vector<MPI_Request> recvs(peers.size(), MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends(peers.size(), MPI_REQUEST_NULL);
  try {
    for (std::size_t i = 0; i < peers.size(); ++i)
      check_mpi(MPI_Irecv(record(peers[i]), static_cast<int>(bytes_), MPI_BYTE, peers[i],
                          kRecordTag, c, &recvs[i]),
                "MPI_Irecv");
    for (std::size_t i = 0; i < peers.size(); ++i)
      check_mpi(MPI_Isend(record(rank_), static_cast<int>(send_bytes), MPI_BYTE, peers[i],
                          kRecordTag, c, &sends[i]),
                "MPI_Isend");
  } catch (...) {  // what was posted may still touch the records
    adopt_requests(recvs, c, records_, "a receive of " + what_);
    adopt_requests(sends, c, records_, "a send of " + what_);
    throw;
  }
  std::vector<int> late;
  for (std::size_t i : wait_messages(recvs, sends, c, deadline, wait, records_, what_))
    late.push_back(peers[i]);
  if (late.empty()) return late;
  // The late members already have our record: tell them this member gave the swap up, so that
  // one that arrives fails too instead of going on with a peer that did not.
  auto note = std::make_shared<std::array<int64_t, 2>>(retraction);
  std::vector<MPI_Request> notes(late.size(), MPI_REQUEST_NULL);
  int rc = MPI_SUCCESS;
  for (std::size_t j = 0; j < late.size() && rc == MPI_SUCCESS; ++j)
    rc = MPI_Isend(note->data(), 2, MPI_INT64_T, late[j], kRetractTag, c, &notes[j]);
  adopt_requests(notes, c, note, "a retraction of " + what_);
  check_mpi(rc, "MPI_Isend");
  return late;
}

std::vector<std::pair<int, std::array<int64_t, 2>>> RecordSwap::retractions() {
  std::vector<std::pair<int, std::array<int64_t, 2>>> out;
  if (net_) return out;  // a late member finds the channel closed instead
  for (int n = 0; n < size_; ++n) {
    if (n == rank_) continue;
    int flag = 0;
    MPI_Status st;
    check_mpi(MPI_Iprobe(n, kRetractTag, comm_.get(), &flag, &st), "MPI_Iprobe");
    if (flag == 0) continue;
    std::array<int64_t, 2> note{};
    check_mpi(MPI_Recv(note.data(), 2, MPI_INT64_T, n, kRetractTag, comm_.get(), &st),
              "MPI_Recv");
    out.emplace_back(n, note);
  }
  return out;
}

std::vector<std::string> RecordSwap::gather_texts(const std::string& mine, Deadline deadline,
                                                  const BackoffPolicy& wait,
                                                  const std::function<std::string()>& missing) {
  if (net_) return gather_texts_net(mine, deadline, missing);
  Records& b = *records_;
  b.text.assign(kText, '\0');
  std::snprintf(b.text.data(), kText, "%s", mine.c_str());
  b.texts.assign(static_cast<std::size_t>(kText) * size_, '\0');
  MPI_Request req;
  check_mpi(MPI_Iallgather(b.text.data(), kText, MPI_CHAR, b.texts.data(), kText, MPI_CHAR,
                           comm_.get(), &req),
            "MPI_Iallgather");
  wait_bounded(req, comm_.get(), deadline, records_, missing, nullptr, wait);
  std::vector<std::string> out;
  for (int n = 0; n < size_; ++n) {
    const char* t = &b.texts[static_cast<std::size_t>(kText) * n];
    out.emplace_back(t, strnlen(t, kText - 1));
  }
  return out;
}

}  // namespace fluxcpp::comm
