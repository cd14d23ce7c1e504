// Network: how a context's hosts talk to each other, chosen once when the context is made and
// never asked about again. Three kinds:
//  * MpiNetwork (comm/mpi_network.hpp): a context made from an MPI communicator. MPI is its
//    control plane whatever its hosts, and carries the ops' traffic between hosts.
//  * GlooNetwork (comm/gloo_network.hpp): a context made from a store whose ranks span hosts,
//    over one gloo channel (comm/gloo_net.hpp).
//  * no network (no_network() below, a null object): ranks on one host only, shared memory for
//    everything. It hands out nothing (asking it is kInternal): an op plans network traffic only
//    when the context has several hosts, which such a context never has, so callers need no
//    branch of their own.
//
// What a Network hands out, for one op each, all collective over the context (in create order):
// the op's Transport (comm/transport.hpp), its point-to-point pairs (comm/p2p_net.hpp) and its
// call handshake's rail swap (comm/record_swap.hpp). What it answers for the context: whether
// anything collective can still cross it (close), the check its hosts need (thread level), and
// its name for the log. The context owns it (comm::Parts::network()); code that uses it never
// asks which kind it is.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/p2p_net.hpp"
#include "comm/record_swap.hpp"
#include "comm/transport.hpp"

namespace fluxcpp::comm {

class Parts;

class Network {
 public:
  virtual ~Network() = default;

  // For the context's log line: "MPI", "gloo" or "none".
  virtual const char* name() const = 0;

  // Collective over the context: the channel of op `op`'s transfers between hosts.
  virtual std::unique_ptr<Transport> transport(const Parts& ctx, const char* op,
                                               std::size_t chunk_bytes) = 0;
  // Collective over the context (every rank, also those without peers on other hosts): the
  // op's point-to-point pairs with `peers` (world ranks on other hosts).
  virtual std::unique_ptr<P2pNet> p2p(const Parts& ctx, const char* op,
                                      std::size_t slot_bytes, int num_slots,
                                      const std::vector<int>& peers) = 0;
  // Collective over the rail of this rank (this host rank's rank on every host; the context
  // has as many ranks on every host): the call handshake's record swap of the op being created
  // (Lifecycle::creating_serial()). `what` names it in errors.
  virtual std::unique_ptr<RecordSwap> rail_swap(const Parts& ctx, std::string what) = 0;

  // Inside the agreed part of the context's create: kInvalidUsage when this network cannot
  // carry ops between `num_hosts` hosts as it was set up (MPI without MPI_THREAD_MULTIPLE).
  virtual void check_hosts(int num_hosts) const = 0;
  // False once nothing collective can cross the network any more (MPI finalized, the gloo
  // channel failed): the context's close is then local.
  virtual bool usable() const = 0;
};

// The network of a context whose ranks share one host (a static object; never freed).
Network& no_network();

}  // namespace fluxcpp::comm
