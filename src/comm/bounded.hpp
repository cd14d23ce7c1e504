// Collectives with a deadline. Creating and destroying contexts and ops runs collectives; a
// blocking MPI collective with a dead or absent peer never returns. Here every collective is
// non-blocking and waited for until the deadline of the current DeadlineScope (none: forever).
// MPI cannot cancel a collective, so one that did not complete is abandoned: its request and the
// buffers it uses (the helpers' own heap copies) go to comm/orphans.hpp, which completes it later
// if it can (at the latest in MPI_Finalize), and the caller must treat the communicator as
// unusable (the context is then broken).
//
// check_in() is the only step that can name who is missing: every rank sends every other rank a
// token point to point and waits for theirs, so at the deadline it knows exactly which peers did
// not arrive. It runs on fluxcpp's own communicators only (a send MPI cannot cancel would
// otherwise linger in the caller's communicator).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/backoff.hpp"
#include "comm/deadline_scope.hpp"
#include "comm/orphans.hpp"

namespace fluxcpp::comm {

// Tests `req` (a collective on `on`) until it completes (yielding the core, then short naps) or
// `deadline` passes; then hands it over to the orphans with `keep` (and `produced`, for
// MPI_Comm_idup) and raises kTimeout with the message `what()` returns.
// `policy`: how it waits (a forward's handshake: comm::peer_wait).
void wait_bounded(MPI_Request& req, MPI_Comm on, Deadline deadline, std::shared_ptr<void> keep,
                  const std::function<std::string()>& what, MPI_Comm* produced = nullptr,
                  const BackoffPolicy& policy = kCollective);

// Point-to-point messages already posted on `on`: waits (as `policy` says) until every receive
// and send has completed, and returns an empty list; or, at `deadline`, hands the receives and
// sends that have not completed to the orphans with `keep` (what MPI may still read or write;
// they keep `on` from being freed, so no later communicator can match their messages) and
// returns the indices of those receives (the peers that did not arrive). An MPI error adopts
// them all too before it is thrown.
// Hands every request of `reqs` that is not MPI_REQUEST_NULL to the orphans with `keep`.
void adopt_requests(std::vector<MPI_Request>& reqs, MPI_Comm on, const std::shared_ptr<void>& keep,
                    const std::string& what) noexcept;
std::vector<std::size_t> wait_messages(std::vector<MPI_Request>& recvs,
                                       std::vector<MPI_Request>& sends, MPI_Comm on,
                                       Deadline deadline, const BackoffPolicy& policy,
                                       const std::shared_ptr<void>& keep, const std::string& what);

// Bounded counterparts of the blocking collectives (the current scope's deadline).
void allreduce(void* buf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
void allgather(const void* send, void* recv, int count, MPI_Datatype type, MPI_Comm comm);
void barrier(MPI_Comm comm);
// MPI_Comm_idup, errors set to return. Call it only once every rank is known to be there (after a
// barrier): in OpenMPI an MPI_Comm_idup that never completes stops the process from creating any
// other communicator.
MPI_Comm dup(MPI_Comm comm);

// The first step of a context create on the caller's communicator: a barrier, then dup. A rank
// that never comes leaves the barrier abandoned, not an MPI_Comm_idup; a barrier that completes
// after this rank's deadline is followed by the idup anyway (orphans.hpp), so every rank runs
// the same collectives on `comm`. `then` is what the caller runs first on the result (blocking
// steps every rank must join): a rank whose barrier or idup timed out runs it on the idup's
// communicator once that completes. A timeout's message ends with `note`.
MPI_Comm enter_dup(MPI_Comm comm, const std::string& note, const Continuation& then);

// Every rank of `comm` sends `token` to every other rank and receives theirs; raises kTimeout
// naming the ranks (of `comm`, mapped through `name_of` for the message) whose token did not
// arrive by the deadline, and kInvalidUsage when a token differs (ranks are creating different
// ops, or destroying while others create). `comm` must be one of fluxcpp's own.
void check_in(MPI_Comm comm, uint64_t token, const char* step,
              const std::function<int(int)>& name_of = {});

}  // namespace fluxcpp::comm
