// ContextImpl from an MPI communicator: the entry on the caller's communicator, the host layout,
// the MPI control plane and the context's MpiNetwork (comm/mpi_network.hpp), which owns the
// communicators made here.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "comm/bounded.hpp"
#include "comm/context_impl.hpp"
#include "comm/host_layout.hpp"
#include "comm/launch_guard.hpp"
#include "comm/mpi_group.hpp"
#include "comm/mpi_network.hpp"
#include "comm/mpi_util.hpp"
#include "comm/orphans.hpp"
#include "deadline.hpp"
#include "error_util.hpp"
#include "fluxcpp/context_mpi.hpp"

namespace fluxcpp {

namespace detail {

using comm::check_mpi;

namespace {

// How long a create drives collectives an earlier create abandoned on the caller's communicator
// (they complete if every rank took part) before it calls the communicator out of step.
constexpr double kOrphanGrace = 0.1;

// Create calls this process made on MPI_COMM_NULL since its last create that entered: each is a
// create it missed, which its next create must not hide (it would pair with the others' earlier
// call). The next entry takes the count and the ranks agree on it.
std::atomic<long long> g_null_creates{0};

}  // namespace

ContextImpl::ContextImpl(const MpiComm& user, const ContextOptions& options,
                         const std::string& local_error) {
  const MPI_Comm user_comm = user.comm;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    raise(Errc::kInvalidUsage, "context: MPI is not initialised (call MPI_Init_thread first)");
  // A rank that cannot take part fails alone; the others time out.
  if (user_comm == MPI_COMM_NULL) {
    g_null_creates.fetch_add(1);
    raise(Errc::kInvalidArgument, "context: comm is MPI_COMM_NULL");
  }
  int thread_level = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&thread_level), "MPI_Query_thread");
  // The context's network: MPI, whatever its hosts (it is the control plane too). It owns the
  // communicators from here on (release() frees them with it).
  auto* mpi = new comm::MpiNetwork(thread_level);
  net_.reset(mpi);
  // Every collective below is bounded: a rank that never calls create, or died, makes the
  // others fail with kTimeout instead of hanging. The one exception is the host layout's
  // blocking splits (MPI has no non-blocking one), which every rank that passed the entry runs,
  // late or not (comm/host_layout.hpp).
  comm::DeadlineScope scope(deadline_after(create_timeout_s(options)), "context create");
  // A collective an earlier create abandoned on this communicator and that a rank never joined
  // has put its ranks out of step: fail at once, saying so, rather than time out again.
  comm::check_no_orphans(user_comm, "context create", kOrphanGrace);
  // Whoever passes the entry, in time or (as an orphan's continuation) late, builds the host
  // layout on its communicator: blocking splits that every rank must join (comm/host_layout).
  const int rpn = options.ranks_per_host;
  // This call's count of missed creates, given back if the call fails before the ranks agree
  // on it (the next create carries it then).
  long long missed = g_null_creates.exchange(0);
  try {
    mpi->own_world(comm::enter_dup(
        user_comm,
        ". MPI cannot cancel a collective: if some rank never reaches it, this communicator can no "
        "longer carry collectives (see 'Failures' in docs/api.md)",
        [rpn](MPI_Comm c) {
          // A late rank's layout: its communicators belong to a create that failed, and are
          // dropped, never freed (comm::free_comm says why).
          comm::HostLayout h = comm::build_host_layout(c, rpn, true);
          h.host = h.rail = MPI_COMM_NULL;
        }));
  } catch (...) {
    g_null_creates.fetch_add(missed);
    throw;
  }
  try {
    const MPI_Comm comm = mpi->comm();
    comm::HostLayout layout = comm::build_host_layout(comm, rpn, false);
    int rank = 0;
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    if (layout.gave_up >= 0)
      raise(Errc::kTimeout,
            "context create: rank {} of the communicator timed out before every rank had entered "
            "this create, and gave up; so the ranks that entered in time fail too (this is rank "
            "{}). Every rank still ran the same collectives: the communicator stays usable once "
            "every rank has returned from this create",
            layout.gave_up, rank);
    mpi->own_layout(std::exchange(layout.host, MPI_COMM_NULL),
                    std::exchange(layout.rail, MPI_COMM_NULL));
    group_ = std::make_unique<comm::MpiGroup>(comm);
    rank = group_->rank();
    const int size = group_->size();
    // The call's identity: a rank that missed a create (on MPI_COMM_NULL) would otherwise pair
    // this call with the others' earlier one.
    try {
      comm::agree_value(comm, "context create",
                        "the create calls made on MPI_COMM_NULL since the previous create (a rank "
                        "that missed one would pair this call with the others' earlier call)",
                        missed);
    } catch (const AgreedError&) {
      missed = 0;  // said on every rank: the next create starts afresh
      throw;
    }
    missed = 0;
    comm::agree(comm, [&] {
      if (!local_error.empty()) raise(Errc::kInvalidArgument, "{} (rank {})", local_error, rank);
      comm::check_launch(user_comm, size);
      FLUXCPP_CHECK_ARG(options.ranks_per_host >= 0, "context: ranks_per_host={} must be >= 0",
                        options.ranks_per_host);
    });
    comm::agree_value(comm, "context", "ranks_per_host", options.ranks_per_host);
    comm::agree(comm, [&] {
      FLUXCPP_CHECK_ARG(!layout.mixed,
                        "context: ranks_per_host={} groups ranks of different hosts (rank {})",
                        options.ranks_per_host, rank);
    });
    place_ranks(layout, rank);
    own_host_group_ = std::make_unique<comm::MpiGroup>(mpi->host_comm());
    host_group_ = own_host_group_.get();
    // Every host rank's pid, for gone_host_peers.
    std::vector<long> pids(topo_.host_size(), 0);
    const long pid = static_cast<long>(getpid());
    comm::allgather(&pid, pids.data(), 1, MPI_LONG, mpi->host_comm());
    life_.set_host_pids(std::move(pids));
    start(options);
  } catch (...) {
    g_null_creates.fetch_add(missed);
    release();
    throw;
  }
}

void ContextImpl::place_ranks(const comm::HostLayout& layout, int rank) {
  shared_size_ = layout.shared_size;
  const std::vector<int>& pairs = layout.pairs;  // (host leader, rank on host) per rank
  const int size = static_cast<int>(pairs.size() / 2);
  std::vector<int> leaders;
  for (int r = 0; r < size; ++r) leaders.push_back(pairs[2 * r]);
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  std::vector<int> host_of(size), local_of(size);
  for (int r = 0; r < size; ++r) {
    host_of[r] = static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), pairs[2 * r]) -
                                  leaders.begin());
    local_of[r] = pairs[2 * r + 1];
  }
  topo_ = comm::Topology(rank, std::move(host_of), std::move(local_of));
}

}  // namespace detail

Context::Context(const MpiComm& comm, const ContextOptions& options) {
  ContextOptions o = options;
  const std::string error = resolve_host_grouping(o);
  impl_ = std::make_shared<detail::ContextImpl>(comm, o, error);
}

}  // namespace fluxcpp
