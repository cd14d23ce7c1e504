// GlooP2pNet: comm/p2p_net.hpp's P2pNet over gloo's TCP transport (comm/gloo_net.hpp), for a
// context made from a store whose ranks span hosts.
//
// A message is two gloo messages on the op's slots: its size (8 bytes, the header slot), then its
// bytes (the data slot; none for an empty message). gloo writes a message only once the receiver
// posted its receive, so a slot's send completes when the receiver took the message: the
// synchronous send the contract asks for. The receiver keeps one header receive posted (probe:
// it landed), and posts the data receive into its inbox when the op takes the message.
//
// Waiter threads (GlooNet::waiters), two per pair, block in gloo's waits: one counts the pair's
// completed sends, one lands headers and messages. A gone peer fails the pair with kTimeout
// naming it. The header receive posted last is never taken back (gloo cannot): its 8 bytes and
// buffer are left behind at destroy, and everything of a pair whose transfers did not drain.
#pragma once

#include <memory>
#include <vector>

#include "comm/p2p_net.hpp"

namespace fluxcpp::comm {

class GlooNet;

class GlooP2pNet : public P2pNet {
 public:
  // Collective over the context (the buffers' allocation is agreed); the op's slots on the
  // context's channel `net`.
  GlooP2pNet(const Parts& c, std::shared_ptr<GlooNet> net, const char* op,
             std::size_t slot_bytes, int num_slots, const std::vector<int>& peers);
  GlooP2pNet(const GlooP2pNet&) = delete;
  GlooP2pNet& operator=(const GlooP2pNet&) = delete;
  ~GlooP2pNet() override;

  bool active() const override { return true; }
  int size() const override { return static_cast<int>(pairs_.size()); }
  int find(int peer) const override;
  void progress() noexcept override {}  // gloo's I/O thread moves the bytes
  bool busy() const override;
  void raise_if_failed() const override {}
  uint64_t completed(int i) override;
  std::string send_error(int i) override;
  char* staging(int i, uint64_t q) override;
  void ready(int i, uint64_t q, std::size_t bytes) noexcept override;
  bool probe(int i, std::size_t* bytes) override;
  void start_recv(int i, std::size_t bytes) override;
  bool recv_done(int i) override;
  const char* inbox(int i) const override;
  void drain(const std::vector<uint64_t>& received, const std::vector<bool>& skip,
             Deadline deadline, const char* op) override;

  struct Pair;  // shared with the pair's waiter jobs

 private:
  void start_jobs(const std::shared_ptr<Pair>& p);
  // Ends the pairs' jobs (aborting their waits) and leaves behind what gloo may still touch.
  void stop() noexcept;

  std::shared_ptr<GlooNet> net_;
  std::string op_;
  uint64_t serial_ = 0;
  int me_ = 0;
  std::size_t slot_ = 0;
  int slots_ = 1;
  std::vector<std::shared_ptr<Pair>> pairs_;
};

}  // namespace fluxcpp::comm
