// The host layout of a context made from MPI: which ranks share a host, the host and rail
// communicators, and every rank's (host, rank on host).
//
// Built by blocking MPI calls (MPI has no non-blocking split), with no deadline. That is safe
// only where every rank of `comm` is known to run the same calls: build() runs first thing on the
// communicator a create's entry produced (comm::enter_dup), and a rank whose wait for that entry
// timed out runs it too, as the continuation of its abandoned MPI_Comm_idup (comm/orphans.hpp),
// when that completes. So no rank ever waits in a split for a peer that gave up: a peer that
// gave up still joins, at its next create, its next progress of the orphans, or MPI_Finalize.
#pragma once

#include <mpi.h>

#include <vector>

namespace fluxcpp::comm {

struct HostLayout {
  MPI_Comm host = MPI_COMM_NULL;  // the ranks of this rank's host
  MPI_Comm rail = MPI_COMM_NULL;  // the ranks with this rank's host rank, ordered by host
  int shared_size = 1;            // ranks on this rank's real (shared-memory) host
  bool mixed = false;             // ranks_per_host put ranks of different real hosts together
  int gave_up = -1;               // the highest rank whose create had timed out, or -1
  // Every rank's (lowest world rank of its host, rank on its host), in rank order.
  std::vector<int> pairs;

  HostLayout() = default;
  HostLayout(const HostLayout&) = delete;
  HostLayout& operator=(const HostLayout&) = delete;
  HostLayout(HostLayout&& o) noexcept;
  HostLayout& operator=(HostLayout&& o) noexcept;
  ~HostLayout();  // frees host and rail unless taken (set to MPI_COMM_NULL)
};

// Collective and blocking over `comm` (see above). ranks_per_host > 0 groups ranks r / rpn as
// hosts (simulated hosts); otherwise real hosts. A negative value is treated as 0 here (the
// caller rejects it afterwards, on every rank). gave_up: this rank builds it as a continuation,
// its create having timed out; every rank learns of it (HostLayout::gave_up), so the ranks that
// were in time fail too and no rank keeps a context its peers do not have. Raises kMpi when an
// MPI call fails.
HostLayout build_host_layout(MPI_Comm comm, int ranks_per_host, bool gave_up);

}  // namespace fluxcpp::comm
