#include "comm/shm_group.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "comm/backoff.hpp"
#include "comm/bounded.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

constexpr uint64_t kReady = 0x666c7578626f6f74ull;  // written last by the creator
constexpr std::size_t kSlotData = 1024;             // bytes a rank moves per round

constexpr std::size_t kSecretBytes = 16;

struct alignas(64) Header {
  std::atomic<uint64_t> ready;
  int64_t size;               // the creator's world size
  char secret[kSecretBytes];  // the id's secret, zero-padded
  // Written by a process that asked for a rank another holds: rank + 1, and its pid. Every rank
  // waiting in the rendezvous fails with it (a duplicate rank means another rank is missing).
  std::atomic<int64_t> clash;
  std::atomic<int64_t> clash_pid;
  // Rank 0 gave up on this segment (and removes its name): the waiting ranks meet its retry in
  // the segment it makes next under the name.
  std::atomic<uint64_t> abandoned;
};

std::string who(const std::function<int(int)>& name_of, int r) {
  return std::to_string(name_of ? name_of(r) : r);
}

// Thrown inside the rendezvous round when rank 0 abandoned the segment: the rank joins again.
struct Rejoin {};

}  // namespace

struct alignas(64) ShmGroup::Slot {
  std::atomic<uint64_t> round;
  std::atomic<int64_t> pid;       // the process that holds this rank (0: nobody yet)
  std::atomic<uint32_t> gave_up;  // its holder withdrew from the rendezvous (named as such)
  char data[2][kSlotData];
};

ShmGroup::Slot& ShmGroup::slot(int r) const {
  auto* base = static_cast<char*>(seg_.data()) + sizeof(Header);
  return reinterpret_cast<Slot*>(base)[r];
}

ShmGroup::ShmGroup(const std::string& name, int rank, int size, const std::string& secret)
    : rank_(rank), size_(size) {
  char want[kSecretBytes] = {};
  std::memcpy(want, secret.data(), std::min(secret.size(), kSecretBytes));
  for (;;) {
    try {
      join(name, want);
      return;
    } catch (const Rejoin&) {
      round_ = 0;  // rank 0 retries: meet it in its next segment, within the same deadline
      seg_ = shm::Segment();
    }
  }
}

void ShmGroup::join(const std::string& name, const char* want) {
  const int rank = rank_, size = size_;
  const std::size_t bytes = sizeof(Header) + sizeof(Slot) * static_cast<std::size_t>(size);
  const Deadline deadline = DeadlineScope::current();
  const std::string& what = DeadlineScope::context();
  if (rank == 0) {
    seg_ = shm::Segment::create_named(name, bytes);  // zero-filled
    auto* h = static_cast<Header*>(seg_.data());
    h->size = size;
    std::memcpy(h->secret, want, kSecretBytes);
    h->ready.store(kReady, std::memory_order_release);
  } else {
    Backoff backoff(kCollective);
    for (;;) {
      // Any size: a rank 0 with another world size made another one, said below. One rank 0
      // abandoned is skipped: its name goes at once, and its retry makes a new one.
      if (shm::Segment::try_open(name, 0, &seg_)) {
        const auto* h = static_cast<const Header*>(seg_.data());
        if (h->ready.load(std::memory_order_acquire) == kReady && h->abandoned.load() == 0) break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline && !missing_at_rejoin_.empty())
        raise(Errc::kTimeout,
              "{}{}timed out in the rendezvous: rank(s) {} did not take part, and rank 0 gave up "
              "(this is rank {})",
              what, what.empty() ? "" : ": ", missing_at_rejoin_, rank);
      if (now >= deadline)
        raise(Errc::kTimeout,
              "{}{}timed out in the rendezvous: rank(s) 0 did not take part (this is rank {}; "
              "rank 0 creates the rendezvous: it has not, or it runs on another machine, or in "
              "a container with another /dev/shm)",
              what, what.empty() ? "" : ": ", rank);
      backoff.pause(now);
    }
  }
  auto* h = static_cast<Header*>(seg_.data());
  // Before a byte of it is trusted: this job's rendezvous carries the id's secret, which no
  // name shows (Segment::try_open has checked it is this user's, mode 0600).
  if (seg_.size() < sizeof(Header) || std::memcmp(h->secret, want, kSecretBytes) != 0)
    raise(Errc::kInvalidUsage,
          "context: the rendezvous segment {} does not carry this id's secret (this is rank {}): "
          "it is not this job's (a stale segment, or another process's under the same name); "
          "refusing it",
          name, rank);
  if (h->size != size || seg_.size() < bytes)
    raise(Errc::kInvalidArgument, "context: world_size={} on rank {}, but rank 0 passed {}", size,
          rank, h->size);
  int64_t holder = 0;
  const int64_t me = static_cast<int64_t>(getpid());
  if (!slot(rank).pid.compare_exchange_strong(holder, me)) {
    h->clash_pid.store(me);
    h->clash.store(rank + 1);  // the ranks waiting in the rendezvous fail with this
    raise(Errc::kInvalidArgument,
          "context: rank {} is taken already (by pid {}): every rank passes its own rank, once",
          rank, holder);
  }
  slot(rank).gave_up.store(0);
  pids_.assign(static_cast<std::size_t>(size), 0);
  std::vector<int64_t> all(static_cast<std::size_t>(size));
  try {
    rendezvous_ = true;
    round(&me, all.data(), sizeof me, sizeof me, "the rendezvous");
    rendezvous_ = false;
  } catch (...) {
    rendezvous_ = false;
    // Withdraw: the round (the others wait for this rank again and name it if it does not come
    // back), then the rank (a retry by this process claims it again). Only rank 0, which created
    // it, removes the name, after marking the segment abandoned so that the ranks still waiting
    // meet its retry; a rank that gives up early must not take the rendezvous from the others.
    slot(rank).gave_up.store(1);
    slot(rank).round.store(0, std::memory_order_release);
    int64_t mine = me;
    slot(rank).pid.compare_exchange_strong(mine, 0);
    if (rank == 0) h->abandoned.store(1);
    seg_.unlink();
    throw;
  }
  for (int r = 0; r < size; ++r) pids_[r] = static_cast<long>(all[r]);
  // Every rank has mapped it: the name can go. Every rank removes it if it still names this
  // segment (gone already for all but the first), so it goes even if rank 0 died after
  // publishing its round, and a newer segment of a rank 0 retrying under the name stays.
  seg_.unlink();
  seg_.unlink_if_same();
}

// In the rendezvous, while some rank has not published its round: a rank passed twice, or rank 0
// gone to a retry (before the deadline: past it, the timeout is said), ends the wait.
void ShmGroup::check_rendezvous(bool past_deadline) {
  const auto* h = static_cast<const Header*>(seg_.data());
  if (const int64_t clash = h->clash.load(); clash > 0) {
    const int r = static_cast<int>(clash - 1);
    const std::string& what = DeadlineScope::context();
    raise(Errc::kInvalidArgument,
          "{}{}two processes passed rank {} (pid {} holds it, pid {} asked for it too; this is "
          "rank {}): every process passes its own rank, once",
          what, what.empty() ? "" : ": ", r, slot(r).pid.load(), h->clash_pid.load(), rank_);
  }
  if (rank_ != 0 && !past_deadline && h->abandoned.load() != 0) {
    // Said if rank 0 does not come back: who was missing when it gave up.
    missing_at_rejoin_.clear();
    for (int q = 1; q < size_; ++q)
      if (slot(q).round.load(std::memory_order_acquire) < round_)
        missing_at_rejoin_ += (missing_at_rejoin_.empty() ? "" : ", ") + std::to_string(q);
    throw Rejoin{};
  }
}

void ShmGroup::round(const void* mine, void* all, std::size_t bytes, std::size_t stride,
                     const char* step) {
  const uint64_t n = ++round_;
  Slot& own = slot(rank_);
  std::memcpy(own.data[n & 1], mine, bytes);
  own.round.store(n, std::memory_order_release);
  const Deadline deadline = DeadlineScope::current();
  Backoff backoff(kCollective);
  for (int r = 0; r < size_;) {
    if (slot(r).round.load(std::memory_order_acquire) >= n) {
      ++r;
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (rendezvous_) check_rendezvous(now >= deadline);
    if (now >= deadline) {
      std::string missing, gave_up;  // never came; came and gave up (withdrew)
      for (int q = 0; q < size_; ++q)
        if (slot(q).round.load(std::memory_order_acquire) < n) {
          std::string& list = slot(q).gave_up.load() != 0 ? gave_up : missing;
          list += (list.empty() ? "" : ", ") + std::to_string(q);
        }
      const std::string& what = DeadlineScope::context();
      std::string who = missing.empty() ? "" : "rank(s) " + missing + " did not take part";
      if (!gave_up.empty())
        who += (who.empty() ? "rank(s) " : "; rank(s) ") + gave_up + " gave up waiting";
      raise(Errc::kTimeout, "{}{}timed out in {}: {} (this is rank {})", what,
            what.empty() ? "" : ": ", step, who, rank_);
    }
    backoff.pause(now);
  }
  for (int r = 0; r < size_; ++r)
    std::memcpy(static_cast<char*>(all) + r * stride, slot(r).data[n & 1], bytes);
}

void ShmGroup::allgather(const void* mine, void* all, std::size_t bytes) {
  std::size_t off = 0;
  do {
    const std::size_t n = std::min(kSlotData, bytes - off);
    round(static_cast<const char*>(mine) + off, static_cast<char*>(all) + off, n, bytes,
          "a collective");
    off += n;
  } while (off < bytes);
}

void ShmGroup::check_in(uint64_t token, const char* step, const std::function<int(int)>& name_of) {
  std::vector<uint64_t> got(static_cast<std::size_t>(size_));
  round(&token, got.data(), sizeof token, sizeof token, step);
  for (int p = 0; p < size_; ++p)
    if (got[p] != token) {
      const std::string& what = DeadlineScope::context();
      raise(Errc::kInvalidUsage,
            "{}{}ranks are at different steps: rank {} sent {:#x}, this rank (rank {}) is at "
            "{:#x} in {} (ranks must create and destroy ops in the same order)",
            what, what.empty() ? "" : ": ", who(name_of, p), got[p], who(name_of, rank_), token,
            step);
    }
}

}  // namespace fluxcpp::comm
