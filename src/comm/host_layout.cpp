#include "comm/host_layout.hpp"

#include <utility>

#include "comm/mpi_util.hpp"
#include "comm/orphans.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

// Plain MPI_Comm_free: the communicators here are fresh (no orphan runs on them), and the
// continuation that builds a layout runs under the orphans' lock (comm::free_comm takes it).
void free_now(MPI_Comm* c) noexcept {
  if (*c == MPI_COMM_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(c);
  *c = MPI_COMM_NULL;
}

}  // namespace

HostLayout::HostLayout(HostLayout&& o) noexcept
    : host(std::exchange(o.host, MPI_COMM_NULL)),
      rail(std::exchange(o.rail, MPI_COMM_NULL)),
      shared_size(o.shared_size),
      mixed(o.mixed),
      gave_up(o.gave_up),
      pairs(std::move(o.pairs)) {}

HostLayout& HostLayout::operator=(HostLayout&& o) noexcept {
  if (this != &o) {
    free_now(&host);
    free_now(&rail);
    host = std::exchange(o.host, MPI_COMM_NULL);
    rail = std::exchange(o.rail, MPI_COMM_NULL);
    shared_size = o.shared_size;
    mixed = o.mixed;
    gave_up = o.gave_up;
    pairs = std::move(o.pairs);
  }
  return *this;
}

HostLayout::~HostLayout() {
  free_now(&host);
  free_now(&rail);
}

HostLayout build_host_layout(MPI_Comm comm, int ranks_per_host, bool gave_up) {
  HostLayout h;
  const uint64_t epoch = comm_epoch();  // before the splits (orphans.hpp)
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");

  // Real hosts first: a forced grouping must not put ranks of different hosts together.
  MPI_Comm shared = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared),
            "MPI_Comm_split_type");
  MPI_Comm_set_errhandler(shared, MPI_ERRORS_RETURN);
  int shared_leader = rank;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &shared_leader, 1, MPI_INT, MPI_MIN, shared);
  MPI_Comm_size(shared, &h.shared_size);
  free_now(&shared);
  check_mpi(rc, "MPI_Allreduce");

  const int key = ranks_per_host > 0 ? rank / ranks_per_host : shared_leader;
  check_mpi(MPI_Comm_split(comm, key, rank, &h.host), "MPI_Comm_split");
  MPI_Comm_set_errhandler(h.host, MPI_ERRORS_RETURN);
  note_comm(h.host, epoch);
  int host_rank = 0;
  MPI_Comm_rank(h.host, &host_rank);
  // The lowest and highest real-host leader on this host (equal unless mixed), and the host's
  // lowest world rank (its number before sorting).
  int lh[3] = {shared_leader, ~shared_leader, rank};
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, lh, 3, MPI_INT, MPI_MIN, h.host), "MPI_Allreduce");
  h.mixed = lh[0] != ~lh[1];

  h.pairs.assign(2 * static_cast<std::size_t>(size), 0);
  int mine[2] = {lh[2], host_rank};
  check_mpi(MPI_Allgather(mine, 2, MPI_INT, h.pairs.data(), 2, MPI_INT, comm), "MPI_Allgather");
  // Hosts are numbered by their lowest rank; the rail of host rank j orders ranks by host.
  int host_id = 0;
  for (int r = 0; r < size; ++r)
    if (h.pairs[2 * r + 1] == 0 && h.pairs[2 * r] < lh[2]) ++host_id;
  check_mpi(MPI_Comm_split(comm, host_rank, host_id, &h.rail), "MPI_Comm_split");
  MPI_Comm_set_errhandler(h.rail, MPI_ERRORS_RETURN);
  note_comm(h.rail, epoch);
  h.gave_up = gave_up ? rank : -1;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &h.gave_up, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  return h;
}

}  // namespace fluxcpp::comm
