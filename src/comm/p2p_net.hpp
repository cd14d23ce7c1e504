// P2pNet: the ordered pairs of a point-to-point op (AsyncSendRecv) whose ends are on different
// hosts, over the context's network (comm/network.hpp hands it out: MPI, comm/mpi_p2p_net.hpp,
// for a context made from MPI; gloo's TCP transport, comm/gloo_p2p_net.hpp, for one made from a
// store). The contract both keep:
//
// Sender: num_slots staging slots per peer in this process. Message q is copied into slot
// (q-1) % num_slots and marked ready; the slot is free again when its send completed, i.e. the
// receiver took the message. So at most num_slots messages per pair are in flight, and a
// receiver never buffers more than num_slots of them.
//
// Receiver: sees the next message's size (probe), receives it into an inbox of this process
// (start_recv, recv_done) and copies it out, so the network never writes into caller memory
// after a call returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fluxcpp::comm {

class Parts;

class P2pNet {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  virtual ~P2pNet() = default;

  virtual bool active() const = 0;
  virtual int size() const = 0;
  // Index of world rank `peer` among this rank's cross-host peers, or -1.
  virtual int find(int peer) const = 0;

  // Progresses every pair: posts sends that became ready, in order, and completes finished ones.
  // Never blocks, never throws (a failure is kept as the pair's send error).
  virtual void progress() noexcept = 0;
  // True while a send or receive of this rank is in flight.
  virtual bool busy() const = 0;
  // For comm::wait_driving: nothing to raise, the errors belong to the pairs (send_error,
  // recv_done).
  virtual void raise_if_failed() const = 0;

  // Sender side of pair i. Messages whose sends completed (in order; the slots they used are
  // free again); the first failure of the pair's sends, or "".
  virtual uint64_t completed(int i) = 0;
  virtual std::string send_error(int i) = 0;
  virtual char* staging(int i, uint64_t q) = 0;
  // Message q (the next in order) is in its staging slot: `bytes` of it. Posts it when possible.
  virtual void ready(int i, uint64_t q, std::size_t bytes) noexcept = 0;

  // Receiver side of pair i (the calling thread only). probe: true with the next message's size
  // if it has arrived. start_recv: receives that message into the inbox; recv_done: whether it
  // has landed (raises when the pair failed).
  virtual bool probe(int i, std::size_t* bytes) = 0;
  virtual void start_recv(int i, std::size_t bytes) = 0;
  virtual bool recv_done(int i) = 0;
  virtual const char* inbox(int i) const = 0;

  // Collective teardown of the messages in flight (after the op's check-in): each pair swaps the
  // number of messages it posted, the receiver discards those it never received, and every send
  // completes. `received[i]`: messages this rank received from pair i; `skip[i]`: the pair broke
  // here (its counters are unknown). Raises kTimeout at the deadline naming the peer.
  virtual void drain(const std::vector<uint64_t>& received, const std::vector<bool>& skip,
                     Deadline deadline, const char* op) = 0;
};

// The context's network's pairs (Network::p2p): collective over the context (every rank, also
// those without peers on other hosts).
std::unique_ptr<P2pNet> make_p2p_net(const Parts& c, const char* op, std::size_t slot_bytes,
                                     int num_slots, const std::vector<int>& peers);

}  // namespace fluxcpp::comm
