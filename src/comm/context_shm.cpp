// ContextImpl without MPI: ranks of one host meeting through a unique id's rendezvous segment.
#include "comm/context_impl.hpp"
#include "comm/deadline_scope.hpp"
#include "comm/shm_group.hpp"
#include "deadline.hpp"
#include "error_util.hpp"

namespace fluxcpp {

namespace detail {

ContextImpl::ContextImpl(const char (&id)[comm::kUniqueIdBytes], int world_size, int rank,
                         const ContextOptions& options, const std::string& local_error) {
  comm::DeadlineScope scope(deadline_after(create_timeout_s(options)), "context create");
  // Found here, these fail on this rank alone; its peers time out in the rendezvous naming it.
  FLUXCPP_CHECK_ARG(world_size >= 1, "context: world_size={} must be >= 1", world_size);
  FLUXCPP_CHECK_ARG(rank >= 0 && rank < world_size,
                    "context: rank={} must be in [0, world_size={})", rank, world_size);
  const comm::ParsedId parsed = comm::parse_unique_id(id);
  if (parsed.boot_id != comm::this_boot_id())
    raise(Errc::kInvalidUsage,
          "context: rank {} runs on host '{}', but the id was made on host '{}': a context "
          "created from an id has its ranks on one host; ranks on several hosts create it from "
          "a store (fluxcpp_context_create_from_store, Context.from_store) or from MPI",
          rank, comm::this_host_name(), parsed.host);
  try {
    auto group = std::make_unique<comm::ShmGroup>(parsed.segment, rank, world_size, parsed.secret);
    life_.set_host_pids(group->pids());
    group_ = std::move(group);
    host_group_ = group_.get();
    topo_ = comm::Topology::one_host(rank, world_size);
    shared_size_ = world_size;
    try {
      comm::agree(*group_, [&] {
        if (!local_error.empty()) raise(Errc::kInvalidArgument, "{} (rank {})", local_error, rank);
        FLUXCPP_CHECK_ARG(options.ranks_per_host == 0 || options.ranks_per_host == world_size,
                          "context: ranks_per_host={} with a context made from an id (one "
                          "host): pass 0 or world_size={}",
                          options.ranks_per_host, world_size);
      });
      start(options);  // one host: no network (comm::no_network())
    } catch (const Error& e) {
      // Say who of the host is gone (a rank that died after the rendezvous).
      const std::string gone = gone_after(e);
      if (gone.empty()) throw;
      throw Error(e.code(), fmt::format("{} ({})", e.what(), gone));
    }
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace detail

UniqueId get_unique_id() {
  UniqueId id;
  comm::make_unique_id(id.internal);
  return id;
}

Context::Context(const UniqueId& id, int world_size, int rank, const ContextOptions& options) {
  ContextOptions o = options;
  const std::string error = resolve_host_grouping(o);
  impl_ = std::make_shared<detail::ContextImpl>(id.internal, world_size, rank, o, error);
}

}  // namespace fluxcpp
