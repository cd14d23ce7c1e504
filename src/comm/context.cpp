// What every context shares, however it was made (the constructors: comm/mpi_context.cpp,
// context_shm.cpp, context_store.cpp): the config and threads, close, release, the checks.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>

#include <unistd.h>

#include "comm/affinity.hpp"
#include "comm/context_impl.hpp"
#include "comm/deadline_scope.hpp"
#include "deadline.hpp"
#include "error_util.hpp"
#include "log.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp {

namespace detail {

namespace {
constexpr uint64_t kDestroyToken = 0xD35720D35720ull;
}  // namespace

void ContextImpl::start(const ContextOptions& options) {
  comm::agree(*group_, [&] {
    network().check_hosts(num_nodes_);
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
      "compute threads, binding {}, timeout {} s, network {}",
      size_, num_nodes_, node_id_, node_rank_, node_size_, config_.comm_threads,
      config_.compute_threads, binding_name(config_.binding), config_.timeout_s, network().name());
}

ContextImpl::~ContextImpl() {
  release();
}

void ContextImpl::release() noexcept {
  if (!creator_.here()) {
    // A copy made by fork(): its streams' threads and its network's state (MPI's, gloo's
    // threads) exist only in the parent, and a thread there may have held a stream's lock when
    // the copy was made. Drop nothing.
    for (auto& s : comm_streams_) (void)s.release();
    for (auto& s : compute_) (void)s.release();
    (void)net_.release();
    return;
  }
  comm_streams_.clear();
  compute_.clear();
  own_node_group_.reset();
  node_group_ = nullptr;
  group_.reset();
  net_.reset();  // frees its communicators, or closes its channel
}

std::vector<std::string> ContextImpl::allgather(const std::string& mine) {
  return comm::allgather_strings(*node_group_, mine);
}

void ContextImpl::agree(const std::function<void()>& fn) {
  node_group_->agree(fn);
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
  // A network that can carry nothing collective any more (MPI finalized, a gloo channel that
  // failed: the call that hit it reported it), or a broken context: local.
  if (!broken_.empty() || !network().usable()) {
    release();
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
