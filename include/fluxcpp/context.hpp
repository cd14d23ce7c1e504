// fluxcpp/context.hpp: the runtime every operator is planned on. Needs no MPI: the constructor
// from an MPI communicator takes an MpiComm, which fluxcpp/context_mpi.hpp defines (it includes
// <mpi.h>; so does the umbrella fluxcpp/fluxcpp.hpp), so that `fluxcpp::Context
// ctx(MPI_COMM_WORLD)` compiles wherever <mpi.h> is at hand and code that makes contexts without
// MPI does not need it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "fluxcpp/export.h"

namespace fluxcpp {

struct ContextOptions {
  int ranks_per_host = 0;   // 0: detect hosts (MPI_COMM_TYPE_SHARED); >0: groups of that many
                            // consecutive ranks act as one host
  double timeout_s = 0.0;   // peer-wait timeout, seconds; 0: FLUXCPP_TIMEOUT_S or its default;
                            // +inf (or beyond a deadline's range, e.g. 1e10): wait forever;
                            // NaN or negative: kInvalidArgument
  int compute_threads = 0;  // GEMM workers per rank; 0: FLUXCPP_COMPUTE_THREADS or automatic
  int comm_threads = 0;     // copy/progress threads per rank; 0: FLUXCPP_COMM_THREADS or 1
  // Deprecated: the former name of ranks_per_host, kept for one release (used when
  // ranks_per_host is 0; both set to different values is kInvalidArgument). Not marked
  // [[deprecated]]: compilers would then warn on every default-constructed ContextOptions.
  int ranks_per_node = 0;
};

namespace detail {
class ContextImpl;
}

// An MPI communicator, as the Context constructor takes it: defined in fluxcpp/context_mpi.hpp,
// implicitly made from an MPI_Comm.
struct MpiComm;

// What an MPI-free context is created from (NCCL's unique id): made by get_unique_id() on one
// rank, carried by the caller to every other rank (any channel: its 128 bytes, unchanged). Good
// for one context.
struct UniqueId {
  char internal[128];
};
// A fresh id; not collective. Throws Error(kSystem) when no random bits can be had.
FLUXCPP_API UniqueId get_unique_id();

// The caller's key-value store a context is made from without MPI, on one host or several (see
// fluxcpp_context_create_from_store in fluxcpp.h): set stores a value, wait returns true once the
// key exists (false after timeout_s), get returns the value of a key that exists. Each may throw.
struct KeyValueStore {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<bool(const std::string& key, double timeout_s)> wait;
  std::function<std::string(const std::string& key)> get;
};

// A duplicated communicator, its host layout, settings, worker threads and logging.
// Construction is collective over `comm` (every rank, same options); on an invalid option on any
// rank, every rank throws Error(kInvalidArgument). Multi-host contexts need MPI initialised with
// MPI_THREAD_MULTIPLE (else kInvalidUsage). A comm that is MPI_COMM_WORLD of size 1 while the
// launcher's environment says it started more processes is kInvalidUsage (see the launch guard
// in docs/design.md). Movable, not copyable. Operators keep the runtime
// alive, so a Context may be destroyed before the operators planned on it.
class FLUXCPP_API Context {
 public:
  // (fluxcpp/context_mpi.hpp: MpiComm converts from MPI_Comm.)
  Context(const MpiComm& comm, const ContextOptions& options = {});
  // Without MPI (which may or may not be initialised), for ranks on one host: collective over
  // the `world_size` processes that pass `id`, each with its own `rank`. Rendezvous, handshakes
  // and timeouts run over shared memory, with the failure model of the MPI context (a rank that
  // never arrives: kTimeout naming it). kInvalidUsage on a rank whose host is not the id's (ranks
  // on several hosts: the store constructor below, or MPI); options.ranks_per_host must be 0 or
  // world_size.
  Context(const UniqueId& id, int world_size, int rank, const ContextOptions& options = {});
  // Without MPI, from the caller's store, ranks on one host or several: collective over the
  // `world_size` processes that pass a store (or prefix) of the context's own. Hosts meet over
  // gloo's TCP transport (fluxcpp_context_create_from_store says how they are told apart and
  // which interface is used). options.ranks_per_host = n > 0: the ranks of one machine in
  // consecutive groups of n act as hosts of their own (the same n on every rank).
  Context(const KeyValueStore& store, int world_size, int rank,
          const ContextOptions& options = {});
  Context(Context&&) noexcept = default;
  Context& operator=(Context&&) noexcept = default;
  ~Context();  // noexcept; never communicates

  int rank() const;
  int world_size() const;
  int host_rank() const;  // rank within this (possibly simulated) host
  int host_size() const;
  int host_id() const;  // index of this host, 0..num_hosts()-1
  int num_hosts() const;
  // The former names of the four above, kept for one release.
  [[deprecated("use host_rank()")]] int node_rank() const { return host_rank(); }
  [[deprecated("use host_size()")]] int node_size() const { return host_size(); }
  [[deprecated("use host_id()")]] int node_id() const { return host_id(); }
  [[deprecated("use num_hosts()")]] int num_nodes() const { return num_hosts(); }

  // Collective teardown: waits until every rank got here, then releases the threads and
  // communicators. Optional (the destructor releases local resources too); idempotent.
  void close();

  const std::shared_ptr<detail::ContextImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::ContextImpl> impl_;
};

}  // namespace fluxcpp
