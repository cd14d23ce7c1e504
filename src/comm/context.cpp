// What every context shares, however it was made (the constructors: comm/mpi_context.cpp,
// context_shm.cpp, context_store.cpp): the config and threads, the parts, close, release.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>

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
  link_parts();
  comm::agree(*group_, [&] {
    parts_.network().check_hosts(topo_.num_hosts());
    int cpus = comm::process_cpu_count();
    int online = static_cast<int>(std::thread::hardware_concurrency());
    // Unbound ranks share the host's CPUs; bound ones own their cpuset.
    int per_rank = cpus >= online && shared_size_ > 0 ? std::max(1, cpus / shared_size_) : cpus;
    runtime_.configure(resolve_config(options, per_rank, shared_size_ > online));
  });
  const Config& config = runtime_.config();
  log_set(config.log_level, topo_.world_rank(), topo_.world_size());

  // Segments whose liveness lock no process holds: left by processes that died in a bootstrap.
  if (const int gone = shm::remove_stale_segments(); gone > 0)
    FLUXCPP_LOG_INFO("context: removed {} segment(s) left by dead processes", gone);

  comm::agree(*group_, [&] { runtime_.start_threads(); });
  FLUXCPP_LOG_INFO(
      "context: {} ranks on {} hosts (this one: host {}, rank {} of {}), {} comm + {} "
      "compute threads, binding {}, timeout {} s, network {}",
      topo_.world_size(), topo_.num_hosts(), topo_.host_id(), topo_.host_rank(), topo_.host_size(),
      config.comm_threads, config.compute_threads, binding_name(config.binding), config.timeout_s,
      parts_.network().name());
}

void ContextImpl::link_parts() {
  parts_.topo_ = &topo_;
  parts_.runtime_ = &runtime_;
  parts_.life_ = &life_;
  parts_.control_ = group_.get();
  parts_.host_ = this;
  parts_.net_ = net_.get();
}

std::string ContextImpl::gone_after(const Error& e) const {
  return e.code() == Errc::kTimeout ? life_.gone_host_peers(topo_) : std::string();
}

ContextImpl::~ContextImpl() {
  release();
}

void ContextImpl::release() noexcept {
  parts_.net_ = nullptr;
  parts_.control_ = nullptr;
  if (!life_.in_creator()) {
    // A copy made by fork(): its streams' threads and its network's state (MPI's, gloo's
    // threads) exist only in the parent, and a thread there may have held a stream's lock when
    // the copy was made. Drop nothing.
    runtime_.abandon();
    (void)net_.release();
    return;
  }
  runtime_.stop();
  own_host_group_.reset();
  host_group_ = nullptr;
  group_.reset();
  net_.reset();  // frees its communicators, or closes its channel
}

std::vector<std::string> ContextImpl::allgather(const std::string& mine) {
  return comm::allgather_strings(*host_group_, mine);
}

void ContextImpl::agree(const std::function<void()>& fn) {
  host_group_->agree(fn);
}

void ContextImpl::close() {
  if (life_.closed()) return;
  life_.mark_closed();        // whatever happens below, the handle is freed
  if (!life_.in_creator()) {  // a copy made by fork(): local, see release()
    release();
    return;
  }
  // A network that can carry nothing collective any more (MPI finalized, a gloo channel that
  // failed: the call that hit it reported it), or a broken context: local.
  if (!life_.broken().empty() || !parts_.network().usable()) {
    release();
    return;
  }
  try {
    comm::DeadlineScope scope(runtime_.deadline(), "context destroy");
    group_->check_in(kDestroyToken, "the destroy check-in");
  } catch (const std::exception& e) {
    life_.mark_broken(e.what());
    release();
    throw;
  }
  release();
}

}  // namespace detail

std::shared_ptr<const comm::Parts> comm::parts_of(const std::shared_ptr<detail::ContextImpl>& ctx) {
  if (!ctx) return nullptr;
  return std::shared_ptr<const comm::Parts>(ctx, &ctx->parts());
}

Context::~Context() = default;

int Context::rank() const {
  return impl_->topo().world_rank();
}
int Context::world_size() const {
  return impl_->topo().world_size();
}
int Context::host_rank() const {
  return impl_->topo().host_rank();
}
int Context::host_size() const {
  return impl_->topo().host_size();
}
int Context::host_id() const {
  return impl_->topo().host_id();
}
int Context::num_hosts() const {
  return impl_->topo().num_hosts();
}

void Context::close() {
  if (impl_) impl_->close();
}

}  // namespace fluxcpp
