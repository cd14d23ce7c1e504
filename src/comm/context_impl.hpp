// The runtime behind fluxcpp::Context (private).
//
// No MPI here: a context made from MPI keeps its communicators in its network
// (comm/mpi_network.hpp), which the ops reach through comm::Network only.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "comm/config.hpp"
#include "comm/group.hpp"
#include "comm/kv_store.hpp"
#include "comm/network.hpp"
#include "comm/stream.hpp"
#include "comm/unique_id.hpp"
#include "deadline.hpp"
#include "fluxcpp/context.hpp"
#include "process_owner.hpp"
#include "shm/signal.hpp"
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
  int rank() const override { return node_rank_; }
  int size() const override { return node_size_; }
  std::vector<std::string> allgather(const std::string& mine) override;
  void agree(const std::function<void()>& fn) override;
  int id() const override { return rank_; }

  // The control plane: every rank of the context (MPI, gloo or shared memory).
  comm::Group& comm() const { return *group_; }
  // How the hosts talk (comm/network.hpp), chosen when the context was made: what hands the ops
  // their transports, point-to-point pairs and rail swaps. A context on one host has
  // comm::no_network(); so has one that released its resources.
  comm::Network& network() const { return net_ ? *net_ : comm::no_network(); }

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  int node_rank() const { return node_rank_; }
  int node_size() const { return node_size_; }
  int node_id() const { return node_id_; }
  int num_nodes() const { return num_nodes_; }
  bool uniform_nodes() const { return uniform_; }
  // World rank of rank `local` of host `node`.
  int world_rank_of(int node, int local) const { return members_[node][local]; }
  int node_of(int world_rank) const { return node_of_[world_rank]; }
  int local_of(int world_rank) const { return local_of_[world_rank]; }

  const Config& config() const { return config_; }
  shm::WaitPolicy wait_policy() const { return policy_; }
  // now() + timeout_s, saturated: an infinite or huge timeout gives time_point::max() (never).
  std::chrono::steady_clock::time_point deadline() const {
    return deadline_after(config_.timeout_s);
  }

  int num_comm_streams() const { return static_cast<int>(comm_streams_.size()); }
  comm::Stream& comm_stream(int i) { return *comm_streams_[i]; }
  int num_compute_workers() const { return static_cast<int>(compute_.size()); }
  comm::Stream& compute_worker(int i) { return *compute_[i]; }

  // Collective (a check-in bounded by the timeout, naming a rank that does not take part) unless
  // the context is broken, then local. Frees what this rank holds whatever it returns.
  void close();
  bool closed() const { return closed_; }

  // Broken: a create or destroy failed midway (its communicator may hold an unmatched
  // collective); every later call on the context or its ops is kInvalidUsage naming `why`.
  void mark_broken(const std::string& why) {
    if (broken_.empty()) broken_ = why;
  }
  const std::string& broken() const { return broken_; }
  // Host peers whose process has exited or is stopped, as "rank R (pid P) has exited" phrases
  // joined by "; " ("" when every host peer runs). What a collective that timed out cannot say
  // itself: who of the host is gone. Local (reads /proc); peers on other hosts are not covered.
  std::string gone_host_peers() const;
  // kInvalidUsage when the context is closed or broken, or this process is a fork of the one
  // that created it (check_process).
  void check_usable(const char* what) const;
  // kInvalidUsage, naming both processes, when this process did not create the context (a copy
  // made by fork(): see process_owner.hpp).
  void check_process(const char* what) const;
  // True in the process that created the context.
  bool in_creator() const { return creator_.here(); }
  // Starts an op's collective create: the op's serial (part of every call's identity, the same
  // on every rank: ops are created collectively, in the same order) and its segments' tag.
  uint64_t begin_op_create(const char* op);
  const std::string& creating_tag() const { return creating_tag_; }
  uint64_t creating_serial() const { return op_serial_; }

  // One thread at a time: a call enters the context for its duration (re-entrant on the thread
  // inside: an op may use another). false: another thread is inside (its call goes on; this one
  // must fail with kInvalidUsage).
  bool try_enter() {
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id none{};
    if (owner_.load(std::memory_order_acquire) == me) {
      ++depth_;
      return true;
    }
    if (!owner_.compare_exchange_strong(none, me, std::memory_order_acquire)) return false;
    depth_ = 1;
    return true;
  }
  void leave() {
    if (--depth_ == 0) owner_.store(std::thread::id{}, std::memory_order_release);
  }

 private:
  void release() noexcept;
  // Every rank's host and local rank, from the layout and this rank's place on its host.
  void place_ranks(const comm::HostLayout& layout, int node_rank, int node_size);
  // What every constructor ends with: the agreed config, the worker threads.
  void start(const ContextOptions& options);

  std::unique_ptr<comm::Network> net_;  // before the groups: they may use it
  std::unique_ptr<comm::Group> group_, own_node_group_;
  comm::Group* node_group_ = nullptr;  // own_node_group_, or group_ when there is one host
  int rank_ = 0, size_ = 1, node_rank_ = 0, node_size_ = 1, node_id_ = 0, num_nodes_ = 1;
  int shared_size_ = 1;  // ranks on this rank's real host
  bool uniform_ = true;
  bool closed_ = false;
  std::vector<std::vector<int>> members_;
  std::vector<int> node_of_, local_of_;
  Config config_;
  shm::WaitPolicy policy_;
  std::vector<std::unique_ptr<comm::Stream>> comm_streams_;
  std::vector<std::unique_ptr<comm::Stream>> compute_;
  uint64_t op_serial_ = 0;
  std::string creating_tag_;
  std::atomic<std::thread::id> owner_{};
  int depth_ = 0;  // entries of the owning thread
  std::string broken_;
  std::vector<long> host_pids_;  // pid of every host rank (gone_host_peers)
  ProcessOwner creator_;         // the process that created the context
};

}  // namespace fluxcpp::detail
