#include "comm/bounded.hpp"

#include <algorithm>
#include <cstring>

#include "comm/backoff.hpp"
#include "comm/mpi_util.hpp"
#include "comm/orphans.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

constexpr int kCheckInTag = 7771;

// The current DeadlineScope's words and ": ", or "" outside a scope.
std::string scope_prefix() {
  const std::string& what = DeadlineScope::context();
  return what.empty() ? what : what + ": ";
}

// "what: timed out after ... in STEP (this is rank R)"
std::string timed_out(const char* step, MPI_Comm comm) {
  int rank = -1, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return fmt::format(
      "{}timed out in {}: not every rank of the communicator (size {}) took part "
      "in time (this is rank {})",
      scope_prefix(), step, size, rank);
}

// Collective buffers on the heap, owned by a shared_ptr that a timeout leaks.
struct Bytes {
  std::vector<char> a, b;
};

}  // namespace

namespace {

// Tests `req` until it completes (true) or `deadline` passes (false). While it waits, the
// orphans progress too (unless `req` is an MPI_Comm_idup, which a blocking split of theirs would
// wait for forever): a late peer may be waiting, in a create's blocking host layout, for the
// continuation of a collective this rank abandoned (orphans.hpp).
bool test_until(MPI_Request& req, Deadline deadline, const BackoffPolicy& policy = kCollective,
                bool drive_orphans = true) {
  Backoff backoff(policy);
  for (int done = 0;;) {
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    if (drive_orphans) progress_orphans();
    backoff.pause(now);
  }
}

// How long a create's entry drives the entry barriers of earlier creates this rank abandoned
// before it posts its own idup (orphans.hpp, drain_continuations).
constexpr double kEarlierEntryGrace = 0.1;

}  // namespace

void wait_bounded(MPI_Request& req, MPI_Comm on, Deadline deadline, std::shared_ptr<void> keep,
                  const std::function<std::string()>& what, MPI_Comm* produced,
                  const BackoffPolicy& policy) {
  if (test_until(req, deadline, policy)) return;
  std::string msg = what();
  adopt_orphan(req, on, std::move(keep), msg, produced);
  req = MPI_REQUEST_NULL;
  throw Error(Errc::kTimeout, std::move(msg));
}

namespace {

// `count` elements of `type` at `buf`, copied into a fresh Bytes::a (what a timeout leaks).
std::shared_ptr<Bytes> heap_copy(const void* buf, int count, MPI_Datatype type) {
  int esz = 0;
  MPI_Type_size(type, &esz);
  auto b = std::make_shared<Bytes>();
  b->a.assign(static_cast<const char*>(buf),
              static_cast<const char*>(buf) + static_cast<std::size_t>(esz) * count);
  return b;
}

}  // namespace

void allreduce(void* buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  auto b = heap_copy(buf, count, type);
  b->b.resize(b->a.size());
  MPI_Request req;
  check_mpi(MPI_Iallreduce(b->a.data(), b->b.data(), count, type, op, comm, &req),
            "MPI_Iallreduce");
  wait_bounded(req, comm, DeadlineScope::current(), b,
               [&] { return timed_out("MPI_Iallreduce", comm); });
  std::memcpy(buf, b->b.data(), b->b.size());
}

void bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  auto b = heap_copy(buf, count, type);
  MPI_Request req;
  check_mpi(MPI_Ibcast(b->a.data(), count, type, root, comm, &req), "MPI_Ibcast");
  wait_bounded(req, comm, DeadlineScope::current(), b,
               [&] { return timed_out("MPI_Ibcast", comm); });
  std::memcpy(buf, b->a.data(), b->a.size());
}

void allgather(const void* send, void* recv, int count, MPI_Datatype type, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  auto b = heap_copy(send, count, type);
  b->b.resize(b->a.size() * size);
  MPI_Request req;
  check_mpi(MPI_Iallgather(b->a.data(), count, type, b->b.data(), count, type, comm, &req),
            "MPI_Iallgather");
  wait_bounded(req, comm, DeadlineScope::current(), b,
               [&] { return timed_out("MPI_Iallgather", comm); });
  std::memcpy(recv, b->b.data(), b->b.size());
}

void barrier(MPI_Comm comm) {
  MPI_Request req;
  check_mpi(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
  wait_bounded(req, comm, DeadlineScope::current(), nullptr,
               [&] { return timed_out("MPI_Ibarrier", comm); });
}

namespace {

// MPI_Comm_idup bounded by the current scope; `then` is for a timeout (orphans.hpp).
MPI_Comm dup_then(MPI_Comm comm, Continuation then) {
  auto out = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  const uint64_t epoch = comm_epoch();
  MPI_Request req;
  check_mpi(MPI_Comm_idup(comm, out.get(), &req), "MPI_Comm_idup");
  if (!test_until(req, DeadlineScope::current(), kCollective, /*drive_orphans=*/false)) {
    std::string msg = timed_out("MPI_Comm_idup", comm);
    adopt_orphan(req, comm, out, msg, out.get(), std::move(then));
    throw Error(Errc::kTimeout, std::move(msg));
  }
  MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  note_comm(*out, epoch);
  return *out;
}

}  // namespace

MPI_Comm dup(MPI_Comm comm) {
  return dup_then(comm, {});
}

MPI_Comm enter_dup(MPI_Comm comm, const std::string& note, const Continuation& then) {
  MPI_Request req;
  check_mpi(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
  if (!test_until(req, DeadlineScope::current())) {
    std::string msg = timed_out("MPI_Ibarrier", comm) + note;
    adopt_entry_barrier(req, comm, msg, then);
    throw Error(Errc::kTimeout, std::move(msg));
  }
  // Every rank is here: the earlier creates' layouts first, in order, then this one's idup.
  drain_continuations(kEarlierEntryGrace, DeadlineScope::current());
  return dup_then(comm, then);
}

void adopt_requests(std::vector<MPI_Request>& reqs, MPI_Comm on, const std::shared_ptr<void>& keep,
                    const std::string& what) noexcept {
  for (MPI_Request& r : reqs) {
    if (r == MPI_REQUEST_NULL) continue;
    // Not cancelled: while it is pending the communicator is never freed (comm::free_comm), so
    // its context id is never reused, and a message the late peer sends, or one of ours it never
    // received, can never be matched by a later communicator's receive.
    adopt_orphan(r, on, keep, what);
    r = MPI_REQUEST_NULL;
  }
}

std::vector<std::size_t> wait_messages(std::vector<MPI_Request>& recvs,
                                       std::vector<MPI_Request>& sends, MPI_Comm on,
                                       Deadline deadline, const BackoffPolicy& policy,
                                       const std::shared_ptr<void>& keep, const std::string& what) {
  try {
    Backoff backoff(policy);
    for (;;) {
      // One test per request (MPI_Testall leaves them all as they were unless every one is
      // done, and the late ones must be known): a completed one becomes MPI_REQUEST_NULL.
      bool all = true;
      for (auto* list : {&recvs, &sends})
        for (MPI_Request& r : *list) {
          if (r == MPI_REQUEST_NULL) continue;
          int done = 0;
          check_mpi(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
          all = all && done != 0;
        }
      if (all) return {};
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      backoff.pause(now);
    }
  } catch (...) {
    adopt_requests(recvs, on, keep, "a receive of " + what);
    adopt_requests(sends, on, keep, "a send of " + what);
    throw;
  }
  std::vector<std::size_t> late;
  for (std::size_t i = 0; i < recvs.size(); ++i)
    if (recvs[i] != MPI_REQUEST_NULL) late.push_back(i);
  adopt_requests(recvs, on, keep, "a receive of " + what);
  adopt_requests(sends, on, keep, "a send of " + what);
  return late;
}

void check_in(MPI_Comm comm, uint64_t token, const char* step,
              const std::function<int(int)>& name_of) {
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  if (size == 1) return;
  struct State {
    std::vector<uint64_t> got;
    uint64_t mine;
    std::vector<MPI_Request> reqs;
  };
  auto st = std::make_shared<State>();
  st->got.assign(size, 0);
  st->mine = token;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    MPI_Request r;
    check_mpi(MPI_Irecv(&st->got[p], 1, MPI_UINT64_T, p, kCheckInTag, comm, &r), "MPI_Irecv");
    st->reqs.push_back(r);
  }
  const std::size_t nrecv = st->reqs.size();
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    MPI_Request r;
    check_mpi(MPI_Isend(&st->mine, 1, MPI_UINT64_T, p, kCheckInTag, comm, &r), "MPI_Isend");
    st->reqs.push_back(r);
  }
  const Deadline deadline = DeadlineScope::current();
  Backoff backoff(kCollective);
  for (;;) {
    // One test per receive (MPI_Testall leaves every request as it was unless all completed, so
    // the names below would include peers that did arrive): a completed one becomes NULL.
    bool all = true;
    for (std::size_t i = 0; i < nrecv; ++i) {
      if (st->reqs[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      check_mpi(MPI_Test(&st->reqs[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
      all = all && done != 0;
    }
    if (all) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      // Name every peer whose token is missing; cancel those receives (MPI can), and hand the
      // sends (it cannot cancel them) to the orphans with the state.
      std::string missing;
      for (int p = 0, i = 0; p < size; ++p) {
        if (p == rank) continue;
        if (st->reqs[i] != MPI_REQUEST_NULL) {
          missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name_of ? name_of(p) : p);
          MPI_Cancel(&st->reqs[i]);
          MPI_Request_free(&st->reqs[i]);
        }
        ++i;
      }
      for (std::size_t i = nrecv; i < st->reqs.size(); ++i)
        adopt_orphan(st->reqs[i], comm, st, fmt::format("a check-in send of {}", step));
      raise(Errc::kTimeout, "{}timed out in {}: rank(s) {} did not take part (this is rank {})",
            scope_prefix(), step, missing, name_of ? name_of(rank) : rank);
    }
    backoff.pause(now);
  }
  // Our sends complete once matched; their buffers live in `st` until then.
  for (std::size_t i = nrecv; i < st->reqs.size(); ++i)
    wait_bounded(st->reqs[i], comm, deadline, st, [&] { return timed_out(step, comm); });
  for (int p = 0; p < size; ++p)
    if (p != rank && st->got[p] != token)
      raise(Errc::kInvalidUsage,
            "{}ranks are at different steps: rank {} sent {:#x}, this rank (rank {}) is at "
            "{:#x} in {} (ranks must create and destroy ops in the same order)",
            scope_prefix(), name_of ? name_of(p) : p, st->got[p], name_of ? name_of(rank) : rank,
            token, step);
}

}  // namespace fluxcpp::comm
