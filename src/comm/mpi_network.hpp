// MpiNetwork: the network (comm/network.hpp) of a context made from an MPI communicator. It owns
// the context's communicators: the duplicate of the caller's (the control plane and the base of
// every op's own), the host's and the rail's (comm/host_layout.hpp), and frees them when it goes
// (unless MPI is finalized, or an abandoned collective still runs on one: comm/orphans.hpp).
//
// Each op gets communicators of its own, duplicated from the context's (its transport's, its
// point-to-point pairs', its rail swap's): MPI cannot cancel a message, so a transfer an op
// abandoned must never be matched by another op's, and a communicator with an abandoned request
// is kept for good (comm::free_comm) without taking the others with it.
#pragma once

#include <mpi.h>

#include "comm/network_over.hpp"

namespace fluxcpp::comm {

class MpiTransport;
class MpiP2pNet;
using MpiNetworkBase = NetworkOver<MPI_Comm, MpiTransport, MpiP2pNet>;
extern template class NetworkOver<MPI_Comm, MpiTransport, MpiP2pNet>;

// Its channel is the context's duplicate of the caller's communicator.
class MpiNetwork final : public MpiNetworkBase {
 public:
  // thread_level: what MPI was initialised with (MPI_Query_thread).
  explicit MpiNetwork(int thread_level)
      : MpiNetworkBase(MPI_COMM_NULL), thread_level_(thread_level) {}
  ~MpiNetwork() override;
  MpiNetwork(const MpiNetwork&) = delete;
  MpiNetwork& operator=(const MpiNetwork&) = delete;

  // Takes the communicators over as the context's MPI constructor makes them.
  void own_world(MPI_Comm comm) { channel_ = comm; }
  void own_layout(MPI_Comm node, MPI_Comm rail) {
    host_comm_ = node;
    rail_comm_ = rail;
  }
  // The context's duplicate of the caller's communicator, its host's and its rail's.
  MPI_Comm comm() const { return channel_; }
  MPI_Comm host_comm() const { return host_comm_; }
  MPI_Comm rail_comm() const { return rail_comm_; }

  const char* name() const override { return "MPI"; }
  std::unique_ptr<RecordSwap> rail_swap(const Parts& ctx, std::string what) override;
  void check_hosts(int num_hosts) const override;
  bool usable() const override;

 private:
  int thread_level_ = MPI_THREAD_SINGLE;
  MPI_Comm host_comm_ = MPI_COMM_NULL, rail_comm_ = MPI_COMM_NULL;
};

}  // namespace fluxcpp::comm
