#include "comm/mpi_p2p_net.hpp"

#include <climits>
#include <cstring>

#include "comm/backoff.hpp"
#include "comm/bounded.hpp"
#include "comm/mpi_util.hpp"
#include "comm/orphans.hpp"
#include "comm/parts.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {
constexpr int kData = 0;   // messages of a pair
constexpr int kCount = 1;  // teardown: how many messages a rank posted to its peer

bool finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}
}  // namespace

MpiP2pNet::MpiP2pNet(const Parts& c, MPI_Comm base, const char* op, std::size_t slot_bytes,
                     int num_slots, const std::vector<int>& peers)
    : slot_(slot_bytes), slots_(num_slots) {
  comm_ = dup(base);
  auto pairs = std::make_unique<std::vector<Pair>>();
  agree(c.control(), [&] {
    pairs->resize(peers.size());
    for (std::size_t i = 0; i < peers.size(); ++i) {
      Pair& p = (*pairs)[i];
      p.rank = peers[i];
      resize_or_raise(p.staging, slot_bytes * static_cast<std::size_t>(num_slots), op,
                      "the staging slots of a peer on another host");
      resize_or_raise(p.inbox, slot_bytes, op, "the inbox of a peer on another host");
      p.bytes.assign(static_cast<std::size_t>(num_slots), 0);
      p.sreq.assign(static_cast<std::size_t>(num_slots), MPI_REQUEST_NULL);
    }
  });
  pairs_ = std::move(pairs);
}

MpiP2pNet::~MpiP2pNet() {
  if (comm_ == MPI_COMM_NULL || finalized() || !creator_.here()) return;  // see process_owner.hpp
  std::lock_guard<std::mutex> lk(mu_);
  progress_locked();
  if (in_flight_locked()) {
    // MPI may still read the staging slots or write the inboxes: keep them and the communicator.
    (void)pairs_.release();
    return;
  }
  free_comm(&comm_);
}

int MpiP2pNet::find(int peer) const {
  for (int i = 0; i < size(); ++i)
    if ((*pairs_)[i].rank == peer) return i;
  return -1;
}

bool MpiP2pNet::in_flight_locked() const {
  for (const Pair& p : *pairs_)
    if (p.posted > p.completed || p.rreq != MPI_REQUEST_NULL) return true;
  return false;
}

bool MpiP2pNet::busy() const {
  if (!active()) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return in_flight_locked();
}

void MpiP2pNet::progress() noexcept {
  if (!active()) return;
  std::lock_guard<std::mutex> lk(mu_);
  progress_locked();
}

void MpiP2pNet::progress_locked() noexcept {
  for (Pair& p : *pairs_) {
    if (!p.error.empty()) continue;
    while (p.posted < p.ready) {
      const std::size_t s = p.posted % static_cast<uint64_t>(slots_);
      const int rc = MPI_Issend(p.staging.data() + s * slot_, static_cast<int>(p.bytes[s]),
                                MPI_BYTE, p.rank, kData, comm_, &p.sreq[s]);
      if (rc != MPI_SUCCESS) {
        p.error = fmt::format("MPI_Issend of message {} to rank {} failed (error {})", p.posted + 1,
                              p.rank, rc);
        break;
      }
      ++p.posted;
    }
    while (p.error.empty() && p.completed < p.posted) {
      int done = 0;
      const std::size_t s = p.completed % static_cast<uint64_t>(slots_);
      const int rc = MPI_Test(&p.sreq[s], &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        p.error = fmt::format("MPI_Test of message {} to rank {} failed (error {})",
                              p.completed + 1, p.rank, rc);
        break;
      }
      if (!done) break;
      ++p.completed;
    }
  }
}

uint64_t MpiP2pNet::completed(int i) {
  std::lock_guard<std::mutex> lk(mu_);
  progress_locked();
  return (*pairs_)[i].completed;
}

std::string MpiP2pNet::send_error(int i) {
  std::lock_guard<std::mutex> lk(mu_);
  return (*pairs_)[i].error;
}

char* MpiP2pNet::staging(int i, uint64_t q) {
  return (*pairs_)[i].staging.data() + ((q - 1) % static_cast<uint64_t>(slots_)) * slot_;
}

void MpiP2pNet::ready(int i, uint64_t q, std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  Pair& p = (*pairs_)[i];
  p.bytes[(q - 1) % static_cast<uint64_t>(slots_)] = bytes;
  p.ready = q;
  progress_locked();
}

bool MpiP2pNet::probe(int i, std::size_t* bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  progress_locked();
  Pair& p = (*pairs_)[i];
  int flag = 0;
  MPI_Status st;
  check_mpi(MPI_Iprobe(p.rank, kData, comm_, &flag, &st), "MPI_Iprobe");
  if (!flag) return false;
  int count = 0;
  check_mpi(MPI_Get_count(&st, MPI_BYTE, &count), "MPI_Get_count");
  *bytes = static_cast<std::size_t>(count);
  return true;
}

void MpiP2pNet::start_recv(int i, std::size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  Pair& p = (*pairs_)[i];
  check_mpi(
      MPI_Irecv(p.inbox.data(), static_cast<int>(bytes), MPI_BYTE, p.rank, kData, comm_, &p.rreq),
      "MPI_Irecv");
}

bool MpiP2pNet::recv_done(int i) {
  std::lock_guard<std::mutex> lk(mu_);
  progress_locked();
  Pair& p = (*pairs_)[i];
  if (p.rreq == MPI_REQUEST_NULL) return true;
  int done = 0;
  check_mpi(MPI_Test(&p.rreq, &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

const char* MpiP2pNet::inbox(int i) const {
  return (*pairs_)[i].inbox.data();
}

void MpiP2pNet::drain(const std::vector<uint64_t>& received, const std::vector<bool>& skip,
                   Deadline deadline, const char* op) {
  if (!active() || size() == 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  progress_locked();
  const int P = size();
  // Heap-held and leaked on a timeout: MPI may still write the counts after we gave up.
  struct Swap {
    std::vector<uint64_t> mine, theirs;
    std::vector<MPI_Request> reqs;
  };
  auto swap = std::make_unique<Swap>();
  swap->mine.assign(P, 0);
  swap->theirs.assign(P, 0);
  swap->reqs.assign(2 * P, MPI_REQUEST_NULL);
  std::vector<uint64_t>& mine = swap->mine;
  std::vector<uint64_t>& theirs = swap->theirs;
  std::vector<MPI_Request>& reqs = swap->reqs;
  for (int i = 0; i < P; ++i) {
    Pair& p = (*pairs_)[i];
    mine[i] = p.posted;
    check_mpi(MPI_Irecv(&theirs[i], 1, MPI_UINT64_T, p.rank, kCount, comm_, &reqs[2 * i]),
              "MPI_Irecv");
    check_mpi(MPI_Isend(&mine[i], 1, MPI_UINT64_T, p.rank, kCount, comm_, &reqs[2 * i + 1]),
              "MPI_Isend");
  }
  // Per pair: the count swap, then the discards, then this rank's own sends.
  std::vector<uint64_t> discarded(P, 0);
  std::vector<bool> done(P, false);
  Backoff backoff(point_to_point(shm::WaitPolicy{}));
  for (int left = P;;) {
    progress_locked();
    for (int i = 0; i < P; ++i) {
      if (done[i]) continue;
      Pair& p = (*pairs_)[i];
      int ok = 0;
      check_mpi(MPI_Testall(2, &reqs[2 * i], &ok, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (!ok) continue;
      if (!skip[i] && p.rreq == MPI_REQUEST_NULL && received[i] + discarded[i] < theirs[i]) {
        int flag = 0;
        MPI_Status st;
        check_mpi(MPI_Iprobe(p.rank, kData, comm_, &flag, &st), "MPI_Iprobe");
        if (flag) {
          int count = 0;
          MPI_Get_count(&st, MPI_BYTE, &count);
          check_mpi(MPI_Irecv(p.inbox.data(), count, MPI_BYTE, p.rank, kData, comm_, &p.rreq),
                    "MPI_Irecv");
        }
      }
      if (p.rreq != MPI_REQUEST_NULL) {
        int got = 0;
        check_mpi(MPI_Test(&p.rreq, &got, MPI_STATUS_IGNORE), "MPI_Test");
        if (got) ++discarded[i];
      }
      const bool drained = skip[i] || received[i] + discarded[i] >= theirs[i];
      if (drained && p.completed == p.posted && p.error.empty()) {
        done[i] = true;
        --left;
      }
    }
    if (left == 0) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      (void)swap.release();
      for (int i = 0; i < P; ++i) {
        if (done[i]) continue;
        const Pair& p = (*pairs_)[i];
        raise(Errc::kTimeout,
              "{} destroy: the teardown with rank {} did not finish within the timeout (this rank "
              "posted {} messages to it, {} completed; it posted {}, this rank took {}{})",
              op, p.rank, p.posted, p.completed, theirs[i], received[i] + discarded[i],
              p.error.empty() ? "" : "; " + p.error);
      }
    }
    backoff.pause();
  }
}

}  // namespace fluxcpp::comm
