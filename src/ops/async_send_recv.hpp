// AsyncSendRecv (private part). See include/fluxcpp/async_send_recv.hpp for the contract and
// docs/ops/async_send_recv.md for the protocol.
//
// Within a host, for the ordered pair a -> b, with i = b's position among a's host peers:
// a's segment holds out[i * S + s] (the slots), rows[i * S + s] (each slot's row count) and
// arrived[i] (messages a published to b); b's segment holds released[j] (messages from a that b
// copied out), j = a's position among b's host peers. Every signal has one writer, and its
// value, a message number, only grows.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/p2p_net.hpp"
#include "comm/parts.hpp"
#include "fluxcpp/async_send_recv.hpp"
#include "ops/core/pair_plan.hpp"
#include "shm/layout.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::detail {

class AsyncSendRecvImpl {
 public:
  static constexpr const char* kOp = "async_send_recv";
  // local_error: see ops::make_op.
  AsyncSendRecvImpl(const std::shared_ptr<ContextImpl>& ctx, const AsyncSendRecvOptions& options,
                    const std::string& local_error = {});
  ~AsyncSendRecvImpl();

  uint64_t send(int dst, const void* data, int64_t m, bool async);
  void send_wait(int dst, uint64_t seq);
  bool send_test(int dst, uint64_t seq);
  bool send_ready(int dst);
  int64_t recv(int src, void* out, int64_t out_rows);
  int64_t probe(int src);
  void close();

  const AsyncSendRecvOptions& options() const { return opts_; }
  const std::vector<int>& peers() const { return peers_; }

 private:
  struct Pair {
    int rank = -1;
    int local = -1;              // host local rank of the peer; -1: on another host
    int mine = -1, theirs = -1;  // within a host: positions (see above)
    int net = -1;                // index in net_
    int stream = -1;             // comm stream of its isend copies (-1: none, copy inline)
    uint64_t sent = 0, received = 0;
    uint64_t ticket = 0;                   // the stream ticket of its last isend copy
    shm::Signal copied;                    // messages whose copy from the caller's data finished
    std::string send_broken, recv_broken;  // the failure that broke each direction
  };

  void create(const std::string& local_error);
  void make_pairs(const ops::PairPlan& plan);
  Pair& pair(const char* fn, const char* arg, int peer);
  // send_wait / send_test: the open op's pair of `dst`, which must have sent message `seq`;
  // progresses the messages between hosts.
  Pair& sent_pair(const char* fn, int dst, uint64_t seq);
  void check_open(const char* fn) const;
  // kInvalidUsage "<op>: <where> rank <peer>: the pair failed earlier: <broken>" unless the pair's
  // side (its send_broken or recv_broken) is intact; where: "send to", "probe of", ...
  void check_intact(const std::string& broken, const std::string& where, int peer) const;
  // The copy of message q into its slot and its publication; on the caller or a comm stream.
  void deliver(Pair& p, uint64_t q, const char* data, std::size_t bytes, int64_t m) noexcept;
  // Waits until `s` reaches target, driving the network when this rank has messages in flight
  // across hosts. false at the deadline, with the value last seen in *observed.
  bool wait(const shm::Signal& s, uint64_t target, SteadyTime deadline, uint64_t* observed);
  [[noreturn]] void timeout(std::string& broken, const std::string& msg);
  int64_t recv_local(Pair& p, void* out, int64_t out_rows, SteadyTime deadline);
  int64_t recv_net(Pair& p, void* out, int64_t out_rows, SteadyTime deadline);
  void wait_copies(SteadyTime deadline) noexcept;

  std::shared_ptr<const comm::Parts> ctx_;  // keeps the context alive (comm::parts_of)
  AsyncSendRecvOptions opts_;
  std::size_t row_ = 0, slot_bytes_ = 0;
  int slots_ = 1;
  int self_ = 0;  // this rank's row in the host's slot arrays (PairPlan::self)
  uint64_t serial_ = 0;
  std::vector<int> peers_;
  std::vector<std::unique_ptr<Pair>> pairs_;  // in the order of peers_
  shm::Layout layout_;
  shm::SlotArray out_;
  shm::SignalArray rows_, arrived_, released_;
  shm::SymmetricBuffer buf_;
  std::unique_ptr<comm::P2pNet> net_;
  bool closed_ = false;
};

}  // namespace fluxcpp::detail
