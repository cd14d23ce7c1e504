#include "comm/orphans.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/backoff.hpp"
#include "error_util.hpp"
#include "process_owner.hpp"

namespace fluxcpp::comm {

namespace {

using Clock = std::chrono::steady_clock;

// How long MPI_Finalize drives the orphans before leaving the rest to MPI.
constexpr double kFinalizeGrace = 2.0;

// The tag of keep_alive's receive (never started: any tag would do; within MPI's minimum
// MPI_TAG_UB of 32767).
constexpr int kKeeperTag = 32767;

struct Orphan {
  MPI_Request req;
  MPI_Comm on;
  std::shared_ptr<void> keep;
  std::string what;
  MPI_Comm* produced;
  // Runs on *produced once it completes, before it is freed (a create's host layout).
  Continuation then;
  bool dup_after = false;  // adopt_entry_barrier: post the MPI_Comm_idup (with `then`) once done
  bool gone = false;       // the user freed `on`: nothing more is posted on it, nothing matches it
};

struct Registry {
  ProcessOwner owner;  // a copy made by fork() touches none of the parent's MPI requests
  std::mutex mu;
  std::vector<Orphan> orphans;
  std::vector<MPI_Comm> deferred;  // to free once no orphan runs on them
  // Communicators the user freed while an orphan ran on them, each held by a persistent receive
  // that is never started (keep_alive): released once no orphan runs on them.
  std::vector<std::pair<MPI_Comm, MPI_Request>> kept;
  bool hooked = false;
};

// Collectives of this process that timed out (each adopted here): the epoch note_comm records.
std::atomic<uint64_t> g_timeouts{0};

// The attribute holding a communicator's epoch (MPI_KEYVAL_INVALID if it cannot be made).
int born_key() {
  static const int key = [] {
    int k = MPI_KEYVAL_INVALID;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &k, nullptr) !=
        MPI_SUCCESS)
      k = MPI_KEYVAL_INVALID;
    return k;
  }();
  return key;
}

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: MPI_Finalize may run after statics die
  return *r;
}

bool mpi_usable() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

bool runs_on(const Registry& r, MPI_Comm c) {
  return std::any_of(r.orphans.begin(), r.orphans.end(),
                     [c](const Orphan& o) { return o.on == c && !o.gone; });
}

// The MPI_Comm_idup that follows a completed entry barrier, posted in the barrier's place
// (under r.mu): the creates' steps stay in the order the creates were made. False: it could not
// be posted (MPI error, out of memory), and the peers' idups will time out.
bool dup_in_place(Orphan& o) noexcept {
  try {
    auto out = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    Orphan next{MPI_REQUEST_NULL, o.on, out, "the MPI_Comm_idup after " + o.what, out.get(),
                std::move(o.then)};
    if (MPI_Comm_idup(o.on, out.get(), &next.req) != MPI_SUCCESS) return false;
    o = std::move(next);
    return true;
  } catch (...) {
    return false;
  }
}

// Under r.mu. The steps of abandoned creates (an entry barrier, the idup after it, the host
// layout on its communicator) run in the order the creates were made, as on every other rank;
// while an abandoned MPI_Comm_idup is pending, no later one is posted and no later layout runs:
// OpenMPI allocates context ids in order, so a blocking split would wait for it forever.
int progress_locked(Registry& r) {
  bool idup_pending = false;
  for (std::size_t i = 0; i < r.orphans.size();) {
    Orphan& o = r.orphans[i];
    const bool create_step = o.dup_after || (o.produced != nullptr && o.then);
    // Gone: on a communicator the user freed, where testing it may crash (at_user_free).
    if (o.gone || (idup_pending && create_step)) {
      ++i;
      continue;
    }
    int done = 0;
    if (MPI_Test(&o.req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
    if (!done) {
      idup_pending = idup_pending || o.produced != nullptr;
      ++i;
      continue;
    }
    if (o.dup_after) {  // tested again at once, as the idup it now is
      if (!dup_in_place(o)) r.orphans.erase(r.orphans.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (o.produced != nullptr && *o.produced != MPI_COMM_NULL) {
      // The ranks whose wait did not time out run `then` on the same communicator (a create's
      // blocking host layout): this rank joins them.
      if (o.then) {
        MPI_Comm_set_errhandler(*o.produced, MPI_ERRORS_RETURN);  // as the in-time ranks' dup
        try {
          o.then(*o.produced);
        } catch (...) {  // an MPI error: nothing to report it to
        }
      }
      // Made by a create that timed out: dropped, never freed (free_comm says why).
      *o.produced = MPI_COMM_NULL;
    }
    r.orphans.erase(r.orphans.begin() + static_cast<std::ptrdiff_t>(i));
  }
  for (auto it = r.deferred.begin(); it != r.deferred.end();) {
    if (runs_on(r, *it)) {
      ++it;
      continue;
    }
    MPI_Comm_free(&*it);
    it = r.deferred.erase(it);
  }
  for (auto it = r.kept.begin(); it != r.kept.end();) {
    if (runs_on(r, it->first)) {
      ++it;
      continue;
    }
    MPI_Request_free(&it->second);  // the communicator goes with its last reference
    it = r.kept.erase(it);
  }
  return static_cast<int>(r.orphans.size());
}

// Drives the orphans (those on `on`, or all with MPI_COMM_NULL) until none is left or `grace_s`
// passed; returns the first still pending (nullptr: none).
const Orphan* drive(Registry& r, MPI_Comm on, double grace_s) {
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(grace_s));
  for (Backoff backoff(kOrphans);; backoff.pause()) {
    progress_locked(r);
    auto it = std::find_if(r.orphans.begin(), r.orphans.end(), [on](const Orphan& o) {
      return !o.gone && (on == MPI_COMM_NULL || o.on == on);
    });
    if (it == r.orphans.end()) return nullptr;
    if (Clock::now() >= end) return &*it;
  }
}

// The delete callback of the MPI_COMM_SELF attribute: runs at the start of MPI_Finalize.
int at_finalize(MPI_Comm, int, void*, void*) {
  Registry& r = registry();
  if (!r.owner.here()) return MPI_SUCCESS;
  std::lock_guard<std::mutex> lock(r.mu);
  drive(r, MPI_COMM_NULL, kFinalizeGrace);
  return MPI_SUCCESS;
}

// A reference on `comm` that outlives the user's MPI_Comm_free: a persistent receive from this
// rank to itself, never started, so it matches nothing. OpenMPI's point-to-point requests hold
// their communicator (the standard: a freed communicator is deallocated once no operation uses
// it), its non-blocking collectives do not: one progressed after the free (a late rank's message
// arriving in MPI_Finalize) crashed in mca_pml_ob1_isend. False: it could not be made.
bool keep_alive(Registry& r, MPI_Comm comm) noexcept {
  int me = 0;
  MPI_Request keeper = MPI_REQUEST_NULL;
  // Errors return from here on (the handle is the user's no more): an MPI call on it that fails
  // (the idup after the barrier) drops that orphan instead of aborting the process.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (MPI_Comm_rank(comm, &me) != MPI_SUCCESS ||
      MPI_Recv_init(nullptr, 0, MPI_BYTE, me, kKeeperTag, comm, &keeper) != MPI_SUCCESS)
    return false;
  try {
    r.kept.emplace_back(comm, keeper);
  } catch (...) {
    return true;  // out of memory: the request is leaked, the communicator with it
  }
  return true;
}

// The delete callback of the attribute adopt_entry_barrier sets on the caller's communicator:
// runs when the user frees it (or at MPI_Finalize for the predefined ones), while it is still
// valid. The orphans on it are driven as in MPI_Finalize: an entry barrier every rank reached
// completes and its MPI_Comm_idup is posted and completes (the peers drive theirs as they free
// it too). One still pending (a rank late by more than the grace) keeps the communicator alive
// (keep_alive) and runs on as before: when the late rank comes, in a later create or in
// MPI_Finalize, the barrier completes and the idup follows on every rank. Where no reference
// can be taken, the orphans on it are marked gone: nothing more is posted on them and no orphan
// of it matches a later communicator that reuses its handle.
int at_user_free(MPI_Comm comm, int, void*, void*) {
  Registry& r = registry();
  if (!r.owner.here()) return MPI_SUCCESS;
  std::lock_guard<std::mutex> lock(r.mu);
  // The predefined ones go in MPI_Finalize, after at_finalize drove the orphans.
  const bool predefined = comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF;
  if (!predefined) drive(r, comm, kFinalizeGrace);
  if (!runs_on(r, comm) || (!predefined && keep_alive(r, comm))) return MPI_SUCCESS;
  for (Orphan& o : r.orphans)
    if (o.on == comm) o.gone = true;
  return MPI_SUCCESS;
}

void watch_user_comm(MPI_Comm comm) {
  static int key = MPI_KEYVAL_INVALID;  // under the registry's lock
  if (key == MPI_KEYVAL_INVALID &&
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_user_free, &key, nullptr) != MPI_SUCCESS)
    return;
  // Set once: setting it again would run the delete callback (which takes the lock we hold).
  void* value = nullptr;
  int found = 0;
  if (MPI_Comm_get_attr(comm, key, &value, &found) == MPI_SUCCESS && !found)
    MPI_Comm_set_attr(comm, key, nullptr);
}

void hook_finalize(Registry& r) {
  if (r.hooked) return;
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &key, nullptr) != MPI_SUCCESS)
    return;
  if (MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr) == MPI_SUCCESS) r.hooked = true;
}

}  // namespace

void adopt_orphan(MPI_Request req, MPI_Comm on, std::shared_ptr<void> keep, std::string what,
                  MPI_Comm* produced, Continuation then) noexcept {
  g_timeouts.fetch_add(1);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  try {
    r.orphans.push_back(
        Orphan{req, on, std::move(keep), std::move(what), produced, std::move(then)});
  } catch (...) {
    new std::shared_ptr<void>(std::move(keep));  // out of memory: leak it, MPI may write into it
    return;
  }
  // An MPI_Comm_idup in progress reads its parent (OpenMPI builds the new communicator from it):
  // a parent the user frees meanwhile crashed the next MPI progress, so its free drives it first.
  if (produced != nullptr) watch_user_comm(on);
  hook_finalize(r);
}

void adopt_entry_barrier(MPI_Request req, MPI_Comm on, std::string what,
                         Continuation then) noexcept {
  g_timeouts.fetch_add(1);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  try {
    r.orphans.push_back(Orphan{req, on, nullptr, std::move(what), nullptr, std::move(then), true});
  } catch (...) {
    return;  // out of memory: the request is dropped (nothing of ours for MPI to write)
  }
  watch_user_comm(on);
  hook_finalize(r);
}

int progress_orphans() noexcept {
  Registry& r = registry();
  if (!r.owner.here()) return 0;
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.orphans.empty() && r.deferred.empty()) return 0;
  if (!mpi_usable()) return static_cast<int>(r.orphans.size());
  return progress_locked(r);
}

void drain_continuations(double barrier_grace_s,
                         std::chrono::steady_clock::time_point deadline) noexcept {
  Registry& r = registry();
  if (!r.owner.here() || !mpi_usable()) return;
  std::lock_guard<std::mutex> lock(r.mu);
  const auto grace_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(barrier_grace_s));
  for (Backoff backoff(kOrphans);; backoff.pause()) {
    progress_locked(r);
    const bool in_grace = Clock::now() < grace_end;
    const bool pending = std::any_of(r.orphans.begin(), r.orphans.end(), [&](const Orphan& o) {
      return !o.gone && (o.then != nullptr) && (o.produced != nullptr || in_grace);
    });
    if (!pending || Clock::now() >= deadline) return;
  }
}

void check_no_orphans(MPI_Comm on, const char* op, double grace_s) {
  Registry& r = registry();
  if (!r.owner.here()) return;
  std::lock_guard<std::mutex> lock(r.mu);
  if (!runs_on(r, on) || !mpi_usable()) return;
  const Orphan* o = drive(r, on, grace_s);
  if (o == nullptr) return;
  raise(Errc::kInvalidUsage,
        "{}: this communicator can no longer carry collectives: an earlier fluxcpp call "
        "abandoned a collective on it that has not completed ({}). Some rank never took part, "
        "so its ranks are out of step: a later collective would pair with the abandoned one "
        "and hang or mismatch. End the job with MPI_Abort, or let every rank use a "
        "communicator made before the failure (see 'Failures' in docs/api.md)",
        op, o->what);
}

uint64_t comm_epoch() noexcept {
  return g_timeouts.load();
}

void note_comm(MPI_Comm c, uint64_t epoch) noexcept {
  const int key = born_key();
  if (c == MPI_COMM_NULL || key == MPI_KEYVAL_INVALID) return;
  MPI_Comm_set_attr(c, key, reinterpret_cast<void*>(static_cast<std::intptr_t>(epoch)));
}

void free_comm(MPI_Comm* c) noexcept {
  if (*c == MPI_COMM_NULL) return;
  if (!mpi_usable() || !registry().owner.here()) {
    *c = MPI_COMM_NULL;
    return;
  }
  // Alive when a collective timed out here: dropped, never freed (its context id stays taken).
  void* born = nullptr;
  int found = 0;
  const int key = born_key();
  if (key != MPI_KEYVAL_INVALID) MPI_Comm_get_attr(*c, key, &born, &found);
  const auto epoch = found ? static_cast<uint64_t>(reinterpret_cast<std::intptr_t>(born)) : 0;
  if (g_timeouts.load() > epoch) {
    *c = MPI_COMM_NULL;
    return;
  }
  // A message no receive will ever match (a peer's record for a call this rank skipped): the
  // communicator is kept, so that its context id is never reused by a later communicator whose
  // receive could match the stale message.
  int pending = 0;
  if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, *c, &pending, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
      pending != 0) {
    *c = MPI_COMM_NULL;
    return;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (runs_on(r, *c)) {
    r.deferred.push_back(*c);
  } else {
    MPI_Comm_free(c);
  }
  *c = MPI_COMM_NULL;
}

}  // namespace fluxcpp::comm
