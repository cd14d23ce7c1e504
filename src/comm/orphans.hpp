// Abandoned MPI requests. MPI cannot cancel a collective: when one times out (a rank is late,
// absent or dead) its request, the buffers it writes and the communicator it may produce
// (MPI_Comm_idup) are handed over here instead of being dropped. They are tested again at every
// later create and at MPI_Finalize, where a hook (an attribute of MPI_COMM_SELF, whose delete
// callback MPI runs first thing in MPI_Finalize) drives them for a while: a collective that
// every rank did reach completes there and its communicator is freed, so MPI_Finalize finds
// nothing half-built. One that a rank never reached stays pending; the communicator it runs on
// is then out of step (a later collective on it would pair with the abandoned one) and every
// later fluxcpp create on it fails at once saying so.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/orphan_progress.hpp"

namespace fluxcpp::comm {

// What runs on the communicator an abandoned MPI_Comm_idup produced, once it completes and
// before it is freed: the blocking steps the ranks that did not time out run on theirs (a
// context's host layout, comm/host_layout.hpp), so that no rank waits in them for this one.
// It runs under the registry's lock and must not call back into this file. In a copy of the
// process made by fork() nothing here touches the parent's requests.
using Continuation = std::function<void(MPI_Comm)>;

// Takes `req` (which did not complete) over, with `keep` (what MPI may still write into) and,
// for MPI_Comm_idup, `produced` (inside `keep`: the communicator to free once it completes, after
// `then` ran on it). `what` says what was abandoned, for the errors of later creates on `on`.
void adopt_orphan(MPI_Request req, MPI_Comm on, std::shared_ptr<void> keep, std::string what,
                  MPI_Comm* produced = nullptr, Continuation then = {}) noexcept;

// The barrier that opens a context create on the caller's communicator, abandoned: once it
// completes (every rank reached it), this rank posts the MPI_Comm_idup that the ranks which saw
// it complete in time have posted, so that every rank runs the same sequence of collectives on
// the communicator; that idup is an orphan too, `then` runs on its communicator, which is then
// freed. An attribute on `on` tells when the user frees it: a barrier not complete by then never
// gets its idup, and no orphan on it is taken for one on a later communicator with its handle.
void adopt_entry_barrier(MPI_Request req, MPI_Comm on, std::string what,
                         Continuation then) noexcept;


// Before a create runs its own blocking host layout: drives the orphans until every abandoned
// MPI_Comm_idup that has a continuation has completed and run it (every rank posted those, so
// they complete; each rank runs the layouts of its creates in the order it made them, and no
// two ranks wait in the layouts of different creates), and abandoned entry barriers that would
// post one for up to `barrier_grace_s` (one a rank never reached never completes). Gives up at
// `deadline` (an idup a peer never posted: its entry was abandoned on a communicator the user
// then freed).
void drain_continuations(double barrier_grace_s,
                         std::chrono::steady_clock::time_point deadline) noexcept;

// Drives the orphans on `on` for up to `grace_s` seconds; if one is still pending, raises
// kInvalidUsage from `op`: the communicator can no longer carry collectives, and what to do.
void check_no_orphans(MPI_Comm on, const char* op, double grace_s);

// The timeout epoch now: read it before making a communicator, and record it on the new one
// with note_comm (a communicator the library made and will free with free_comm). Neither takes a
// lock: a continuation may call them.
uint64_t comm_epoch() noexcept;
void note_comm(MPI_Comm c, uint64_t epoch) noexcept;

// Frees `*c` now, or once the orphans that run on it have completed (at MPI_Finalize the
// communicators still pending are left to MPI). Sets *c to MPI_COMM_NULL. A communicator that
// was alive when a collective of this process timed out (or made before note_comm) is never
// freed, only dropped: a peer whose side of the timed-out call went on (it returned SUCCESS, or
// is still sending) may have messages on their way to it, and a freed communicator's context
// id is reused by the next one made, whose receives would match them.
void free_comm(MPI_Comm* c) noexcept;

}  // namespace fluxcpp::comm
