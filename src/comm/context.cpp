#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>

#include <unistd.h>

#include "comm/affinity.hpp"
#include "comm/bounded.hpp"
#include "comm/context_impl.hpp"
#include "comm/gloo_net.hpp"
#include "comm/host_layout.hpp"
#include "comm/launch_guard.hpp"
#include "comm/mpi_group.hpp"
#include "comm/mpi_util.hpp"
#include "comm/orphans.hpp"
#include "deadline.hpp"
#include "error_util.hpp"
#include "log.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp {

namespace detail {

using comm::check_mpi;

namespace {

constexpr uint64_t kDestroyToken = 0xD35720D35720ull;

// How long a create drives collectives an earlier create abandoned on the caller's communicator
// (they complete if every rank took part) before it calls the communicator out of step.
constexpr double kOrphanGrace = 0.1;

// Create calls this process made on MPI_COMM_NULL since its last create that entered: each is a
// create it missed, which its next create must not hide (it would pair with the others' earlier
// call). The next entry takes the count and the ranks agree on it.
std::atomic<long long> g_null_creates{0};

}  // namespace

ContextImpl::ContextImpl(MPI_Comm user_comm, const ContextOptions& options,
                         const std::string& local_error) {
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
  const int rpn = options.ranks_per_node;
  // This call's count of missed creates, given back if the call fails before the ranks agree
  // on it (the next create carries it then).
  long long missed = g_null_creates.exchange(0);
  try {
    comm_ = comm::enter_dup(
        user_comm,
        ". MPI cannot cancel a collective: if some rank never reaches it, this communicator can no "
        "longer carry collectives (see 'Failures' in docs/api.md)",
        [rpn](MPI_Comm c) {
          // A late rank's layout: its communicators belong to a create that failed, and are
          // dropped, never freed (comm::free_comm says why).
          comm::HostLayout h = comm::build_host_layout(c, rpn, true);
          h.node = h.rail = MPI_COMM_NULL;
        });
  } catch (...) {
    g_null_creates.fetch_add(missed);
    throw;
  }
  try {
    comm::HostLayout layout = comm::build_host_layout(comm_, rpn, false);
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    if (layout.gave_up >= 0)
      raise(Errc::kTimeout,
            "context create: rank {} of the communicator timed out before every rank had entered "
            "this create, and gave up; so the ranks that entered in time fail too (this is rank "
            "{}). Every rank still ran the same collectives: the communicator stays usable once "
            "every rank has returned from this create",
            layout.gave_up, rank_);
    node_comm_ = std::exchange(layout.node, MPI_COMM_NULL);
    rail_comm_ = std::exchange(layout.rail, MPI_COMM_NULL);
    group_ = std::make_unique<comm::MpiGroup>(comm_);
    rank_ = group_->rank();
    size_ = group_->size();
    // The call's identity: a rank that missed a create (on MPI_COMM_NULL) would otherwise pair
    // this call with the others' earlier one.
    try {
      comm::agree_value(comm_, "context create",
                        "the create calls made on MPI_COMM_NULL since the previous create (a rank "
                        "that missed one would pair this call with the others' earlier call)",
                        missed);
    } catch (const AgreedError&) {
      missed = 0;  // said on every rank: the next create starts afresh
      throw;
    }
    missed = 0;
    comm::agree(comm_, [&] {
      if (!local_error.empty()) raise(Errc::kInvalidArgument, "{} (rank {})", local_error, rank_);
      comm::check_launch(user_comm, size_);
      FLUXCPP_CHECK_ARG(options.ranks_per_node >= 0, "context: ranks_per_node={} must be >= 0",
                        options.ranks_per_node);
    });
    comm::agree_value(comm_, "context", "ranks_per_node", options.ranks_per_node);
    comm::agree(comm_, [&] {
      FLUXCPP_CHECK_ARG(!layout.mixed,
                        "context: ranks_per_node={} groups ranks of different hosts (rank {})",
                        options.ranks_per_node, rank_);
    });
    place_ranks(layout);
    own_node_group_ = std::make_unique<comm::MpiGroup>(node_comm_);
    node_group_ = own_node_group_.get();
    // Every host rank's pid, for gone_host_peers.
    host_pids_.assign(node_size_, 0);
    const long pid = static_cast<long>(getpid());
    comm::allgather(&pid, host_pids_.data(), 1, MPI_LONG, node_comm_);
    start(options, thread_level);
  } catch (...) {
    g_null_creates.fetch_add(missed);
    release();
    throw;
  }
}

void ContextImpl::start(const ContextOptions& options, int thread_level) {
  comm::agree(*group_, [&] {
    if (num_nodes_ > 1 && thread_level < MPI_THREAD_MULTIPLE)
      raise(Errc::kInvalidUsage,
            "context: ranks span {} hosts, which needs MPI initialised with MPI_THREAD_MULTIPLE "
            "(this rank has thread level {})",
            num_nodes_, thread_level);
    int cpus = comm::process_cpu_count();
    int online = static_cast<int>(std::thread::hardware_concurrency());
    // Unbound ranks share the host's CPUs; bound ones own their cpuset.
    int per_rank = cpus >= online && shared_size_ > 0 ? std::max(1, cpus / shared_size_) : cpus;
    config_ = resolve_config(options, per_rank, shared_size_ > online);
  });
  log_set(config_.log_level, rank_, size_);
  policy_.spin = std::chrono::nanoseconds(static_cast<long long>(config_.spin_us * 1e3));
  policy_.yield = std::chrono::nanoseconds(static_cast<long long>(config_.yield_us * 1e3));

  // Segments whose liveness lock no process holds: left by processes that died in a bootstrap.
  if (const int gone = shm::remove_stale_segments(); gone > 0)
    FLUXCPP_LOG_INFO("context: removed {} segment(s) left by dead processes", gone);

  comm::agree(*group_, [&] {
    int index = 0;
    for (int i = 0; i < config_.comm_threads; ++i, ++index)
      comm_streams_.push_back(std::make_unique<comm::Stream>(
          fmt::format("fluxcpp-comm{}", i), policy_,
          [b = config_.binding, index] { comm::bind_current_thread(b, index); }));
    for (int i = 0; i < config_.compute_threads; ++i, ++index)
      compute_.push_back(std::make_unique<comm::Stream>(
          fmt::format("fluxcpp-gemm{}", i), policy_,
          [b = config_.binding, index] { comm::bind_current_thread(b, index); }));
  });
  FLUXCPP_LOG_INFO(
      "context: {} ranks on {} hosts (this one: host {}, rank {} of {}), {} comm + {} "
      "compute threads, binding {}, timeout {} s{}",
      size_, num_nodes_, node_id_, node_rank_, node_size_, config_.comm_threads,
      config_.compute_threads, binding_name(config_.binding), config_.timeout_s,
      comm_ == MPI_COMM_NULL ? ", without MPI" : "");
}

void ContextImpl::place_ranks(const comm::HostLayout& layout) {
  shared_size_ = layout.shared_size;
  MPI_Comm_rank(node_comm_, &node_rank_);
  MPI_Comm_size(node_comm_, &node_size_);
  const std::vector<int>& pairs = layout.pairs;  // (host leader, rank on host) per rank
  std::vector<int> leaders;
  for (int r = 0; r < size_; ++r) leaders.push_back(pairs[2 * r]);
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  num_nodes_ = static_cast<int>(leaders.size());
  members_.assign(num_nodes_, {});
  node_of_.resize(size_);
  local_of_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    int n = static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), pairs[2 * r]) -
                             leaders.begin());
    node_of_[r] = n;
    local_of_[r] = pairs[2 * r + 1];
    if (static_cast<int>(members_[n].size()) <= local_of_[r]) members_[n].resize(local_of_[r] + 1);
    members_[n][local_of_[r]] = r;
  }
  node_id_ = node_of_[rank_];
  uniform_ = true;
  for (const auto& m : members_) uniform_ = uniform_ && m.size() == members_[0].size();
}

ContextImpl::~ContextImpl() {
  release();
}

void ContextImpl::release() noexcept {
  if (!creator_.here()) {
    // A copy made by fork(): its streams' threads and its MPI state exist only in the parent,
    // and a thread there may have held a stream's lock when the copy was made. Drop nothing.
    for (auto& s : comm_streams_) (void)s.release();
    for (auto& s : compute_) (void)s.release();
    if (net_) (void)new std::shared_ptr<comm::GlooNet>(std::move(net_));  // its threads too
    return;
  }
  comm_streams_.clear();
  compute_.clear();
  own_node_group_.reset();
  node_group_ = nullptr;
  group_.reset();
  net_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // communicators died with MPI
  // One that still carries an abandoned collective is freed once that completes (orphans.hpp).
  for (MPI_Comm* c : {&rail_comm_, &node_comm_, &comm_}) comm::free_comm(c);
}

std::vector<std::string> ContextImpl::allgather(const std::string& mine) {
  return comm::allgather_strings(*node_group_, mine);
}

void ContextImpl::agree(const std::function<void()>& fn) {
  node_group_->agree(fn);
}

MPI_Comm ContextImpl::dup_comm(MPI_Comm base) {
  return comm::dup(base);
}

void ContextImpl::check_process(const char* what) const {
  if (!creator_.here())
    raise(Errc::kInvalidUsage,
          "{}: this process (pid {}) is a copy made by fork() of process {}, which created the "
          "context: a context and its ops work only in the process that created them (create "
          "contexts in the child, or start children with the spawn method; see 'Processes' in "
          "docs/api.md)",
          what, static_cast<long>(getpid()), static_cast<long>(creator_.pid()));
}

void ContextImpl::check_usable(const char* what) const {
  check_process(what);
  if (closed_) raise(Errc::kInvalidUsage, "{}: the context was closed", what);
  if (!broken_.empty())
    raise(Errc::kInvalidUsage,
          "{}: the context failed earlier and can only be destroyed (first failure: {})", what,
          broken_);
}

uint64_t ContextImpl::begin_op_create(const char* op) {
  ++op_serial_;
  creating_tag_ = fmt::format("{}{}", op, op_serial_);
  return op_serial_;
}

void ContextImpl::close() {
  if (closed_) return;
  closed_ = true;          // whatever happens below, the handle is freed
  if (!creator_.here()) {  // a copy made by fork(): local, see release()
    release();
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A network channel that failed (a host gone, the link cut) was reported by the call that hit
  // it; nothing collective can cross it any more.
  const bool net_failed = net_ && !net_->failure().empty();
  if ((finalized && comm_ != MPI_COMM_NULL) || !broken_.empty() || net_failed) {
    release();  // local: nothing collective can be trusted
    return;
  }
  try {
    comm::DeadlineScope scope(deadline(), "context destroy");
    group_->check_in(kDestroyToken, "the destroy check-in");
  } catch (const std::exception& e) {
    mark_broken(e.what());
    release();
    throw;
  }
  release();
}

}  // namespace detail

Context::Context(MPI_Comm comm, const ContextOptions& options)
    : impl_(std::make_shared<detail::ContextImpl>(comm, options)) {}

Context::~Context() = default;

int Context::rank() const {
  return impl_->world_rank();
}
int Context::world_size() const {
  return impl_->world_size();
}
int Context::node_rank() const {
  return impl_->node_rank();
}
int Context::node_size() const {
  return impl_->node_size();
}
int Context::node_id() const {
  return impl_->node_id();
}
int Context::num_nodes() const {
  return impl_->num_nodes();
}

void Context::close() {
  if (impl_) impl_->close();
}

}  // namespace fluxcpp
