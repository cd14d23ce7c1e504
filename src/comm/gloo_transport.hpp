// GlooTransport: comm/transport.hpp's Transport over gloo's TCP transport (comm/gloo_net.hpp),
// for a context made from a store whose ranks span hosts.
//
// A transfer is one gloo buffer over its bytes; its chunks are gloo messages on the op's slot
// for the transfer's tag (a pair matches them in order). Receives are all posted at once. A
// waiter thread per transfer (GlooNet::waiters) does the rest, asleep between events: a send's
// posts each chunk once its ready signal shows it written (a futex sleep) and counts the
// completions; a receive's raises the landed signal chunk by chunk. gloo's I/O thread moves the
// bytes whatever this rank's threads do, so the transfers overlap the GEMM and nobody polls:
// busy() is false, and the ops' waits sleep on their signals.
//
// A peer that is gone (its connection closed) fails the transport with kTimeout naming it; a
// deadline in complete() fails it with kTimeout naming the peer and the bytes missing. An
// abandoned batch with transfers in flight keeps its buffers for good (poisoned) and fails the
// channel: gloo cannot cancel a posted transfer, so later messages of the pair would not match.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/transport.hpp"

namespace fluxcpp::comm {

class GlooNet;

class GlooTransport : public Transport {
 public:
  // Not collective: the op's slots on the context's channel `net`.
  GlooTransport(const Parts& ctx, std::shared_ptr<GlooNet> net, const char* op,
                std::size_t chunk_bytes);
  ~GlooTransport() override;

  void post(std::vector<Transfer> batch) override;
  bool progress() noexcept override;
  bool idle() const override;
  // Nothing to drive: a waiter sleeps on its signal (and looks at failed() every few ms).
  bool busy() const override { return false; }
  // abandon() in flight fails the channel, which closes every pair (GlooNet::fail).
  bool takes_user_memory() const override { return true; }
  void complete(Deadline deadline) override;
  void raise_if_failed() const override;
  bool failed() const override;
  void abandon(const Error& why) noexcept override;

  struct Batch;  // shared with the waiter jobs

 private:
  std::string missing() const;

  std::shared_ptr<GlooNet> net_;
  uint64_t serial_ = 0;
  std::shared_ptr<Batch> batch_;
};

}  // namespace fluxcpp::comm
