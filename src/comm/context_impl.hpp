// The context behind fluxcpp::Context (private): the owner that composes its pieces — the
// Topology (where the ranks are), the Runtime (config, deadlines, threads), the Lifecycle
// (closed/broken, creator process, owner thread, op serial), the Network and the groups — and
// hands them to the ops as one comm::Parts (comm/parts.hpp). The ops never see this class.
//
// No MPI here: a context made from MPI keeps its communicators in its network
// (comm/mpi_network.hpp), which the ops reach through comm::Network only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/config.hpp"
#include "comm/group.hpp"
#include "comm/kv_store.hpp"
#include "comm/lifecycle.hpp"
#include "comm/network.hpp"
#include "comm/parts.hpp"
#include "comm/runtime.hpp"
#include "comm/topology.hpp"
#include "comm/unique_id.hpp"
#include "fluxcpp/context.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::comm {
struct HostLayout;
}  // namespace fluxcpp::comm

namespace fluxcpp::detail {

class ContextImpl : public shm::HostTeam {
 public:
  // From an MPI communicator (fluxcpp/context_mpi.hpp makes an MpiComm of an MPI_Comm); its
  // network is MPI (comm/mpi_network.hpp), its control plane MPI.
  // local_error: a problem the caller found on this rank only (e.g. a NULL out-pointer in the
  // C ABI); construction still runs collectively and fails on every rank with that message.
  ContextImpl(const MpiComm& comm, const ContextOptions& options,
              const std::string& local_error = {});
  // Without MPI, ranks on one host: rank `rank` of `world_size`, meeting through the id's
  // rendezvous segment (comm/shm_group.hpp). Argument errors this rank alone can see (a bad id,
  // rank or world size, another host) raise here, before the rendezvous: the others time out
  // naming this rank.
  ContextImpl(const char (&id)[comm::kUniqueIdBytes], int world_size, int rank,
              const ContextOptions& options, const std::string& local_error = {});
  // Without MPI, from the caller's key-value store (comm/kv_store.hpp), ranks on one host or
  // several: the ranks of a host meet in shared memory (an id its first rank sets in the store),
  // hosts over the gloo channel (comm/gloo_net.hpp). Hosts are told apart by the machine (boot
  // id and host name), or by FLUXCPP_HOST_ID where tests simulate hosts on one machine.
  ContextImpl(const comm::KvStore& store, int world_size, int rank, const ContextOptions& options,
              const std::string& local_error = {});
  ~ContextImpl() override;

  // shm::HostTeam over the host's group.
  int rank() const override { return topo_.host_rank(); }
  int size() const override { return topo_.host_size(); }
  std::vector<std::string> allgather(const std::string& mine) override;
  void agree(const std::function<void()>& fn) override;
  int id() const override { return topo_.world_rank(); }

  // The pieces, for the ops (comm/parts.hpp; an op holds them through comm::parts_of). Tests
  // hand a context to the ops' machinery (a Handshake) through the conversion.
  const comm::Parts& parts() const { return parts_; }
  operator const comm::Parts&() const { return parts_; }  // NOLINT(google-explicit-constructor)
  const comm::Topology& topo() const { return topo_; }
  comm::Runtime& runtime() { return runtime_; }
  comm::Lifecycle& life() { return life_; }

  // Collective (a check-in bounded by the timeout, naming a rank that does not take part) unless
  // the context is broken, then local. Frees what this rank holds whatever it returns.
  void close();

  // What callers outside src/ (tests, benchmarks) read of a context, by their old names.
  int world_rank() const { return topo_.world_rank(); }
  int world_size() const { return topo_.world_size(); }
  int host_rank() const { return topo_.host_rank(); }
  int host_size() const { return topo_.host_size(); }
  int num_hosts() const { return topo_.num_hosts(); }
  const Config& config() const { return runtime_.config(); }
  shm::WaitPolicy wait_policy() const { return runtime_.wait_policy(); }
  std::chrono::steady_clock::time_point deadline() const { return runtime_.deadline(); }
  uint64_t begin_op_create(const char* op) { return life_.begin_op_create(op); }
  const std::string& creating_tag() const { return life_.creating_tag(); }

 private:
  void release() noexcept;
  // The topology from the host layout (every rank's host leader and rank on its host).
  void place_ranks(const comm::HostLayout& layout, int rank);
  // What every constructor ends with: the agreed config, the worker threads.
  void start(const ContextOptions& options);
  // Points the Parts at the pieces (after the network and the groups are made).
  void link_parts();
  // For a create that failed with `e`: the host peers that are gone when it timed out ("" when
  // it did not, or none is).
  std::string gone_after(const Error& e) const;

  std::unique_ptr<comm::Network> net_;  // before the groups: they may use it
  std::unique_ptr<comm::Group> group_, own_host_group_;
  comm::Group* host_group_ = nullptr;  // own_host_group_, or group_ when there is one host
  comm::Topology topo_;
  int shared_size_ = 1;  // ranks on this rank's real host
  comm::Runtime runtime_;
  comm::Lifecycle life_;
  comm::Parts parts_;
};

}  // namespace fluxcpp::detail
