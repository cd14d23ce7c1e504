#include "comm/mpi_transport.hpp"

#include <sched.h>

#include <algorithm>

#include "comm/backoff.hpp"
#include "comm/bounded.hpp"
#include "comm/mpi_util.hpp"
#include "comm/orphans.hpp"
#include "comm/parts.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

MpiTransport::MpiTransport(const Parts& ctx, MPI_Comm base, const char* op,
                           std::size_t chunk_bytes)
    : Transport(ctx, op, chunk_bytes) {
  // MPI counts are int: one message stays well below 2 GiB whatever the block size.
  chunk_ = std::min<std::size_t>(chunk_, std::size_t{1} << 30);
  comm_ = dup(base);
}

MpiTransport::~MpiTransport() {
  if (comm_ == MPI_COMM_NULL || !creator_.here()) return;  // creator_: see process_owner.hpp
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (!idle()) abandon(Error(Errc::kInternal, op_ + ": transfers abandoned by destroy"));
  // A poisoned communicator may still carry a transfer; freeing it is legal in MPI, but keep
  // nothing to chance: it is leaked with the memory the transfer may touch.
  if (!poisoned_) free_comm(&comm_);
}

void MpiTransport::post(std::vector<Transfer> batch) {
  std::lock_guard<std::mutex> lk(mu_);
  if (error_) throw *error_;
  if (pending_.load() != 0) raise(Errc::kInternal, "{}: transfers posted over a busy batch", op_);
  streams_.clear();
  reqs_.clear();
  owner_.clear();
  std::size_t messages = 0;
  for (Transfer& t : batch) {
    if (t.bytes == 0) continue;
    Stream s;
    s.t = t;
    s.chunk = t.chunk > 0 ? std::min(t.chunk, chunk_) : chunk_;
    s.chunks = (t.bytes + s.chunk - 1) / s.chunk;
    if (!t.send) s.landed.assign(s.chunks, false);
    messages += s.chunks;
    streams_.push_back(std::move(s));
  }
  pending_.store(messages, std::memory_order_release);
  try {
    // Receives first, all of them: a sender's chunk then finds its receive already posted.
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      Stream& s = streams_[i];
      if (s.t.send) continue;
      for (std::size_t c = 0; c < s.chunks; ++c) {
        const std::size_t off = c * s.chunk, len = std::min(s.chunk, s.t.bytes - off);
        MPI_Request r;
        check_mpi(
            MPI_Irecv(s.t.buf + off, static_cast<int>(len), MPI_BYTE, s.t.peer, s.t.tag, comm_, &r),
            "MPI_Irecv");
        reqs_.push_back(r);
        owner_.emplace_back(static_cast<int>(i), c);
      }
    }
  } catch (const Error& e) {
    fail_locked(e);
    abandon_locked();
    throw;
  }
}

bool MpiTransport::progress() noexcept {
  if (idle() || failed()) return true;
  std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
  if (!lk.owns_lock()) return false;
  if (error_) return true;
  try {
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      Stream& s = streams_[i];
      while (s.t.send && s.posted < s.chunks) {
        const std::size_t off = s.posted * s.chunk, len = std::min(s.chunk, s.t.bytes - off);
        if (s.t.signal != nullptr && shm::signal_load(*s.t.signal) < s.t.base + off + len) break;
        MPI_Request r;
        check_mpi(
            MPI_Isend(s.t.buf + off, static_cast<int>(len), MPI_BYTE, s.t.peer, s.t.tag, comm_, &r),
            "MPI_Isend");
        reqs_.push_back(r);
        owner_.emplace_back(static_cast<int>(i), s.posted);
        ++s.posted;
      }
    }
    if (reqs_.empty()) return idle();
    thread_local std::vector<int> index;
    index.resize(reqs_.size());
    int n = 0;
    check_mpi(MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &n, index.data(),
                           MPI_STATUSES_IGNORE),
              "MPI_Testsome");
    if (n == MPI_UNDEFINED) n = 0;
    for (int j = 0; j < n; ++j) {
      const auto [si, msg] = owner_[index[j]];
      Stream& s = streams_[si];
      ++s.done;
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      if (s.t.send) continue;
      s.landed[msg] = true;
      while (s.prefix < s.chunks && s.landed[s.prefix]) ++s.prefix;
      if (s.t.signal != nullptr)
        shm::signal_max(*s.t.signal, s.t.base + std::min(s.t.bytes, s.prefix * s.chunk));
    }
    if (n > 0) {  // drop completed requests (MPI set them to MPI_REQUEST_NULL)
      std::size_t k = 0;
      for (std::size_t j = 0; j < reqs_.size(); ++j)
        if (reqs_[j] != MPI_REQUEST_NULL) {
          reqs_[k] = reqs_[j];
          owner_[k++] = owner_[j];
        }
      reqs_.resize(k);
      owner_.resize(k);
    }
  } catch (const Error& e) {
    fail_locked(e);
    abandon_locked();
    return true;
  } catch (...) {
    fail_locked(Error(Errc::kInternal, op_ + ": unexpected error in MPI progress"));
    abandon_locked();
    return true;
  }
  return idle();
}

void MpiTransport::complete(Deadline deadline) {
  // Nothing else to do: poll, backing off from the last completion on (kTransportComplete).
  std::size_t seen = pending_.load();
  Backoff backoff(kTransportComplete);
  while (!progress()) {
    const auto now = Clock::now();
    const std::size_t p = pending_.load();
    if (p != seen) {
      seen = p;
      backoff.reset(now);
    }
    if (now >= deadline) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_ && pending_.load() != 0) {
        fail_locked(Error(Errc::kTimeout, missing_locked()));
        abandon_locked();
      }
      break;
    }
    backoff.pause(now);
  }
  raise_if_failed();
}

void MpiTransport::raise_if_failed() const {
  if (!failed()) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (error_) throw *error_;
}

void MpiTransport::abandon(const Error& why) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  fail_locked(why);
  abandon_locked();
}

void MpiTransport::fail_locked(Error e) noexcept {
  if (!error_) error_ = std::make_unique<Error>(std::move(e));
  failed_.store(true, std::memory_order_release);
}

// Cancels the receives and gives everything a grace period; whatever is still in flight after
// that may touch its buffer at any time, so the transport reports itself poisoned.
void MpiTransport::abandon_locked() noexcept {
  for (std::size_t j = 0; j < reqs_.size(); ++j)
    if (!streams_[owner_[j].first].t.send && reqs_[j] != MPI_REQUEST_NULL) MPI_Cancel(&reqs_[j]);
  const auto until = Clock::now() + std::chrono::seconds(1);
  int all = reqs_.empty() ? 1 : 0;
  while (!all && Clock::now() < until) {
    if (MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &all, MPI_STATUSES_IGNORE) !=
        MPI_SUCCESS)
      break;
    if (!all) sched_yield();
  }
  if (!all) {
    poisoned_ = true;
    for (MPI_Request& r : reqs_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  reqs_.clear();
  owner_.clear();
  streams_.clear();
  pending_.store(0, std::memory_order_release);
}

std::string MpiTransport::missing_locked() const {
  for (const Stream& s : streams_) {
    if (s.done == s.chunks) continue;
    const std::size_t have =
        s.t.send ? std::min(s.t.bytes, s.done * s.chunk) : std::min(s.t.bytes, s.prefix * s.chunk);
    return timeout_text("MPI", &s.t, have, s.t.send && s.posted < s.chunks);
  }
  return timeout_text("MPI", nullptr, 0, false);
}

}  // namespace fluxcpp::comm
