#include <algorithm>
#include <cstdlib>

#include "comm/affinity.hpp"
#include "comm/context_impl.hpp"
#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "fluxcpp/version.hpp"
#include "log.hpp"

namespace fluxcpp {

int version() noexcept {
  return FLUXCPP_VERSION_MAJOR * 10000 + FLUXCPP_VERSION_MINOR * 100 + FLUXCPP_VERSION_PATCH;
}

namespace detail {

using comm::check_mpi;

namespace {

// Launch guard. Processes started by a launcher that is not MPI's own (torchrun), or by one whose
// process manager this MPI does not speak (srun without --mpi, another MPI's mpirun), each see
// an MPI_COMM_WORLD of one rank. A context over it would run every rank alone at W = 1 and give
// silently wrong results, so it is refused with a hint. These variables each mean "the launcher
// started N processes of one job"; SLURM_NTASKS is not among them because a batch script sees
// the allocation's task count while it runs as one process.
void check_launch(MPI_Comm user_comm, int size) {
  if (size != 1) return;
  int cmp = MPI_UNEQUAL;
  check_mpi(MPI_Comm_compare(user_comm, MPI_COMM_WORLD, &cmp), "MPI_Comm_compare");
  if (cmp != MPI_IDENT && cmp != MPI_CONGRUENT) return;
  if (env_choice("FLUXCPP_LAUNCH_GUARD", {"on", "off"}) == 1) return;
  for (const char* var : {"WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                          "MV2_COMM_WORLD_SIZE"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n <= 1) continue;
    raise(Errc::kInvalidUsage,
          "context: MPI_COMM_WORLD has 1 rank but {}={}: the launcher started {} processes that "
          "each initialised MPI alone. Start them as one MPI job: mpirun -np {} <program>, or "
          "srun --mpi=pmix -n {} <program> (FLUXCPP_LAUNCH_GUARD=off allows one-rank contexts "
          "in such a job on purpose)",
          var, v, n, n, n);
  }
}

}  // namespace

ContextImpl::ContextImpl(MPI_Comm user_comm, const ContextOptions& options,
                         const std::string& local_error) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    raise(Errc::kInvalidUsage, "context: MPI is not initialised (call MPI_Init_thread first)");
  if (user_comm == MPI_COMM_NULL) raise(Errc::kInvalidArgument, "context: comm is MPI_COMM_NULL");
  check_mpi(MPI_Query_thread(&thread_level_), "MPI_Query_thread");
  check_mpi(MPI_Comm_dup(user_comm, &comm_), "MPI_Comm_dup");
  try {
    // From here on errors are raised collectively, so no rank is left waiting in a collective.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    comm::agree(comm_, [&] {
      if (!local_error.empty()) raise(Errc::kInvalidArgument, "{} (rank {})", local_error, rank_);
      check_launch(user_comm, size_);
      FLUXCPP_CHECK_ARG(options.ranks_per_node >= 0, "context: ranks_per_node={} must be >= 0",
                        options.ranks_per_node);
    });
    comm::agree_value(comm_, "context", "ranks_per_node", options.ranks_per_node);

    // Real hosts first: a forced grouping must not put ranks of different hosts together.
    MPI_Comm shared = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared),
              "MPI_Comm_split_type");
    int shared_size = 1, shared_leader = rank_;
    MPI_Comm_size(shared, &shared_size);
    MPI_Allreduce(MPI_IN_PLACE, &shared_leader, 1, MPI_INT, MPI_MIN, shared);
    MPI_Comm_free(&shared);

    int group_key = shared_leader;  // ranks with the same key form one host
    if (options.ranks_per_node > 0) group_key = rank_ / options.ranks_per_node;
    check_mpi(MPI_Comm_split(comm_, group_key, rank_, &node_comm_), "MPI_Comm_split");
    MPI_Comm_set_errhandler(node_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(node_comm_, &node_rank_);
    MPI_Comm_size(node_comm_, &node_size_);
    comm::agree(comm_, [&] {
      int lo = shared_leader, hi = shared_leader;
      MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, node_comm_);
      MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, node_comm_);
      FLUXCPP_CHECK_ARG(lo == hi,
                        "context: ranks_per_node={} groups ranks of different hosts (rank {})",
                        options.ranks_per_node, rank_);
    });

    // Layout of every rank: (host, rank on host). Hosts are numbered by their lowest rank.
    std::vector<int> pairs;
    comm::agree(comm_, [&] {
      resize_or_raise(pairs, 2 * static_cast<std::size_t>(size_), "context", "the rank layout");
    });
    int leader = rank_;
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node_comm_);
    int mine[2] = {leader, node_rank_};
    check_mpi(MPI_Allgather(mine, 2, MPI_INT, pairs.data(), 2, MPI_INT, comm_), "MPI_Allgather");
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
      if (static_cast<int>(members_[n].size()) <= local_of_[r])
        members_[n].resize(local_of_[r] + 1);
      members_[n][local_of_[r]] = r;
    }
    node_id_ = node_of_[rank_];
    uniform_ = true;
    for (const auto& m : members_) uniform_ = uniform_ && m.size() == members_[0].size();
    check_mpi(MPI_Comm_split(comm_, node_rank_, node_id_, &rail_comm_), "MPI_Comm_split");
    MPI_Comm_set_errhandler(rail_comm_, MPI_ERRORS_RETURN);

    comm::agree(comm_, [&] {
      if (num_nodes_ > 1 && thread_level_ < MPI_THREAD_MULTIPLE)
        raise(Errc::kInvalidUsage,
              "context: ranks span {} hosts, which needs MPI initialised with MPI_THREAD_MULTIPLE "
              "(this rank has thread level {})",
              num_nodes_, thread_level_);
      int cpus = comm::process_cpu_count();
      int online = static_cast<int>(std::thread::hardware_concurrency());
      // Unbound ranks share the host's CPUs; bound ones own their cpuset.
      int per_rank = cpus >= online && shared_size > 0 ? std::max(1, cpus / shared_size) : cpus;
      config_ = resolve_config(options, per_rank, shared_size > online);
    });
    log_set(config_.log_level, rank_, size_);
    policy_.spin = std::chrono::nanoseconds(static_cast<long long>(config_.spin_us * 1e3));
    policy_.yield = std::chrono::nanoseconds(static_cast<long long>(config_.yield_us * 1e3));

    comm::agree(comm_, [&] {
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
        "compute threads, binding {}, timeout {} s",
        size_, num_nodes_, node_id_, node_rank_, node_size_, config_.comm_threads,
        config_.compute_threads, binding_name(config_.binding), config_.timeout_s);
  } catch (...) {
    release();
    throw;
  }
}

ContextImpl::~ContextImpl() {
  release();
}

void ContextImpl::release() noexcept {
  comm_streams_.clear();
  compute_.clear();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // communicators died with MPI
  for (MPI_Comm* c : {&rail_comm_, &node_comm_, &comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

std::vector<std::string> ContextImpl::allgather(const std::string& mine) {
  int len = static_cast<int>(mine.size()), maxlen = 0;
  check_mpi(MPI_Allreduce(&len, &maxlen, 1, MPI_INT, MPI_MAX, node_comm_), "MPI_Allreduce");
  std::string buf;
  // Agreed: a rank that cannot allocate must not leave its peers inside the allgather.
  comm::agree(node_comm_, [&] {
    resize_or_raise(buf, static_cast<std::size_t>(maxlen) * node_size_, "context",
                    "the host's allgather buffer");
  });
  std::string padded = mine;
  padded.resize(maxlen, '\0');
  check_mpi(
      MPI_Allgather(padded.data(), maxlen, MPI_CHAR, buf.data(), maxlen, MPI_CHAR, node_comm_),
      "MPI_Allgather");
  std::vector<std::string> out;
  for (int i = 0; i < node_size_; ++i) {
    std::string s = buf.substr(static_cast<std::size_t>(i) * maxlen, maxlen);
    s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
    out.push_back(std::move(s));
  }
  return out;
}

void ContextImpl::agree(const std::function<void()>& fn) {
  comm::agree(node_comm_, fn);
}

MPI_Comm ContextImpl::dup_comm(MPI_Comm base) {
  MPI_Comm c = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(base, &c), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return c;
}

void ContextImpl::close() {
  if (closed_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
  closed_ = true;
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
