// MpiP2pNet: comm/p2p_net.hpp's P2pNet over MPI, on a communicator of the op's own (one tag for
// data: MPI keeps the messages of a pair in order). A message is posted as a synchronous send
// (MPI_Issend): its slot is free once the receiver matched it. The receiver probes the next
// message (its size says its row count). MPI moves data only inside MPI calls: every call of the
// op progresses every pair.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/p2p_net.hpp"
#include "process_owner.hpp"

namespace fluxcpp::comm {

class Parts;

class MpiP2pNet : public P2pNet {
 public:
  // Collective over the context (every rank, also those without peers on other hosts): a
  // communicator of the op's own (a duplicate of `base`, the context's), then the buffers
  // (allocation failures agreed world-wide).
  MpiP2pNet(const Parts& c, MPI_Comm base, const char* op, std::size_t slot_bytes,
            int num_slots, const std::vector<int>& peers);
  MpiP2pNet(const MpiP2pNet&) = delete;
  MpiP2pNet& operator=(const MpiP2pNet&) = delete;
  // Never communicates. Requests still in flight keep their buffers and the communicator alive
  // for good (MPI may still touch them).
  ~MpiP2pNet() override;

  bool active() const override { return comm_ != MPI_COMM_NULL; }
  int size() const override { return static_cast<int>(pairs_ ? pairs_->size() : 0); }
  // Index of world rank `peer` among this rank's cross-host peers, or -1.
  int find(int peer) const override;

  // Progresses every pair: posts sends that became ready, in order, and completes finished ones.
  // Never blocks, never throws (an MPI failure is kept as the pair's send error).
  void progress() noexcept override;
  // True while a send or receive of this rank is in flight.
  bool busy() const override;
  // For comm::wait_driving: nothing to raise, the errors belong to the pairs (send_error,
  // recv_done).
  void raise_if_failed() const override {}

  // Sender side of pair i. Messages whose sends completed (in order; the slots they used are
  // free again); the first MPI failure of the pair's sends, or "".
  uint64_t completed(int i) override;
  std::string send_error(int i) override;
  char* staging(int i, uint64_t q) override;
  // Message q (the next in order) is in its staging slot: `bytes` of it. Posts it when possible.
  void ready(int i, uint64_t q, std::size_t bytes) noexcept override;

  // Receiver side of pair i (the calling thread only). probe: true with the next message's size
  // if it has arrived. start_recv: receives that message into the inbox; recv_done: whether it
  // has landed (raises kMpi on failure).
  bool probe(int i, std::size_t* bytes) override;
  void start_recv(int i, std::size_t bytes) override;
  bool recv_done(int i) override;
  const char* inbox(int i) const override;

  // Collective teardown of the messages in flight (after the op's check-in): each pair swaps the
  // number of messages it posted, the receiver discards those it never received, and every send
  // completes. `received[i]`: messages this rank received from pair i; `skip[i]`: the pair broke
  // here (its counters are unknown). Raises kTimeout at the deadline naming the peer.
  void drain(const std::vector<uint64_t>& received, const std::vector<bool>& skip,
             Deadline deadline, const char* op) override;

 private:
  struct Pair {
    int rank = -1;
    std::vector<char> staging;       // num_slots * slot_bytes
    std::vector<std::size_t> bytes;  // per slot: the bytes of the message in it
    std::vector<MPI_Request> sreq;   // per slot
    uint64_t ready = 0, posted = 0, completed = 0;
    std::vector<char> inbox;  // slot_bytes
    MPI_Request rreq = MPI_REQUEST_NULL;
    std::string error;
  };
  void progress_locked() noexcept;
  bool in_flight_locked() const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  ProcessOwner creator_;  // the destructor does nothing in a fork's copy
  std::size_t slot_ = 0;
  int slots_ = 1;
  mutable std::mutex mu_;
  // Heap-held so that requests MPI may still complete can keep it alive after destruction.
  std::unique_ptr<std::vector<Pair>> pairs_;
};

}  // namespace fluxcpp::comm
