#include "comm/mpi_record_swap.hpp"

#include <cstdint>
#include <utility>

#include "comm/bounded.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {
constexpr int kMpiRecordTag = 1;   // (the swap's own communicator)
constexpr int kMpiRetractTag = 2;  // "I gave this swap up", after the record
}  // namespace

MpiRecordSwap::MpiRecordSwap(MPI_Comm base, std::string what)
    : RecordSwap(std::move(what)), comm_(dup(base)) {
  check_mpi(MPI_Comm_rank(comm_.get(), &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_.get(), &size_), "MPI_Comm_size");
}

std::vector<int> MpiRecordSwap::swap(const Sends& sends, Deadline deadline,
                                     const BackoffPolicy& wait, std::array<int64_t, 2> retraction) {
  const MPI_Comm c = comm_.get();
  std::vector<int> peers;  // every other member, starting after this one
  for (int i = 1; i < size_; ++i) peers.push_back((rank_ + i) % size_);
  std::vector<MPI_Request> recvs(peers.size(), MPI_REQUEST_NULL);
  std::vector<MPI_Request> isends(peers.size(), MPI_REQUEST_NULL);
  try {
    for (std::size_t i = 0; i < peers.size(); ++i)
      check_mpi(MPI_Irecv(record(peers[i]), static_cast<int>(bytes_), MPI_BYTE, peers[i],
                          kMpiRecordTag, c, &recvs[i]),
                "MPI_Irecv");
    for (std::size_t i = 0; i < peers.size(); ++i) {
      const auto [data, bytes] = send_of(sends, peers[i]);
      check_mpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peers[i], kMpiRecordTag, c,
                          &isends[i]),
                "MPI_Isend");
    }
  } catch (...) {  // what was posted may still touch the records
    adopt_requests(recvs, c, records_, "a receive of " + what_);
    adopt_requests(isends, c, records_, "a send of " + what_);
    throw;
  }
  std::vector<int> late;
  for (std::size_t i : wait_messages(recvs, isends, c, deadline, wait, records_, what_))
    late.push_back(peers[i]);
  if (late.empty()) return late;
  // The late members already have our record: tell them this member gave the swap up, so that
  // one that arrives fails too instead of going on with a peer that did not.
  auto note = std::make_shared<std::array<int64_t, 2>>(retraction);
  std::vector<MPI_Request> notes(late.size(), MPI_REQUEST_NULL);
  int rc = MPI_SUCCESS;
  for (std::size_t j = 0; j < late.size() && rc == MPI_SUCCESS; ++j)
    rc = MPI_Isend(note->data(), 2, MPI_INT64_T, late[j], kMpiRetractTag, c, &notes[j]);
  adopt_requests(notes, c, note, "a retraction of " + what_);
  check_mpi(rc, "MPI_Isend");
  return late;
}

std::vector<std::pair<int, std::array<int64_t, 2>>> MpiRecordSwap::retractions() {
  std::vector<std::pair<int, std::array<int64_t, 2>>> out;
  for (int n = 0; n < size_; ++n) {
    if (n == rank_) continue;
    int flag = 0;
    MPI_Status st;
    check_mpi(MPI_Iprobe(n, kMpiRetractTag, comm_.get(), &flag, &st), "MPI_Iprobe");
    if (flag == 0) continue;
    std::array<int64_t, 2> note{};
    check_mpi(MPI_Recv(note.data(), 2, MPI_INT64_T, n, kMpiRetractTag, comm_.get(), &st),
              "MPI_Recv");
    out.emplace_back(n, note);
  }
  return out;
}

std::vector<std::string> MpiRecordSwap::gather_texts(const std::string& mine, Deadline deadline,
                                                     const BackoffPolicy& wait,
                                                     const std::function<std::string()>& missing) {
  Records& b = *records_;
  b.text.assign(kText, '\0');
  put_text(mine, b.text.data());
  b.texts.assign(static_cast<std::size_t>(kText) * size_, '\0');
  MPI_Request req;
  check_mpi(MPI_Iallgather(b.text.data(), kText, MPI_CHAR, b.texts.data(), kText, MPI_CHAR,
                           comm_.get(), &req),
            "MPI_Iallgather");
  wait_bounded(req, comm_.get(), deadline, records_, missing, nullptr, wait);
  return texts_of(b.texts.data());
}

}  // namespace fluxcpp::comm
