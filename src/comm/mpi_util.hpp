// MPI helpers: error checks and collective error agreement.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

#include "process_owner.hpp"

namespace fluxcpp::comm {

// Owns a communicator; frees it on destruction (unless MPI is already finalized).
class UniqueComm {
 public:
  UniqueComm() = default;
  explicit UniqueComm(MPI_Comm c) : c_(c) {}
  UniqueComm(UniqueComm&& o) noexcept : c_(o.c_) { o.c_ = MPI_COMM_NULL; }
  UniqueComm& operator=(UniqueComm&& o) noexcept;
  UniqueComm(const UniqueComm&) = delete;
  UniqueComm& operator=(const UniqueComm&) = delete;
  ~UniqueComm();
  MPI_Comm get() const { return c_; }

 private:
  MPI_Comm c_ = MPI_COMM_NULL;
  ProcessOwner creator_;
};

// Raises Error(kMpi) naming `what` and MPI's error string when rc != MPI_SUCCESS.
void check_mpi(int rc, const char* what);

// Collective over comm: runs fn; if it throws on any rank, every rank throws an AgreedError with
// the code and message of the lowest failing rank (other ranks' messages add "(reported by rank
// r)"). Doubles as a barrier. Its collectives are bounded by the current DeadlineScope
// (comm/bounded.hpp): at the deadline it raises kTimeout, which is not agreed.
void agree(MPI_Comm comm, const std::function<void()>& fn);

// Collective: every rank passes its value of the named argument; if they differ, every rank
// throws kInvalidArgument "<op>: ranks disagree on <name>: rank a passed x, rank b passed y"
// (an AgreedError). Bounded like agree.
void agree_value(MPI_Comm comm, const char* op, const char* name, long long value);

// agree_value for n named values at once (one reduction when the ranks agree); the first value
// on which they disagree is the one reported.
void agree_values(MPI_Comm comm, const char* op, const char* const* names, const long long* values,
                  int n);

}  // namespace fluxcpp::comm
