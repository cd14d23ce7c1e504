// Point-to-point messages of any size over one AsyncSendRecv (every peer, chunked), progressed
// without blocking: a send or receive advances only as far as slots and arrived messages allow,
// so that a thread can keep several in flight and run collectives between them (two ranks that
// each send before they receive never wait on each other). Each message is a header (tag, byte
// count) and its chunks; a receive checks both against what it expects, and a mismatch breaks
// receiving from that peer (its later receives fail saying so). A receive from any source takes
// the first peer with a message, whatever its tag.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "capi_call.hpp"

namespace fluxcpp::backend {

class Mailbox {
 public:
  // Collective over the context: every rank creates its mailbox at the same point.
  Mailbox(fluxcpp_context_t ctx, int rank, int size);
  ~Mailbox();  // collective (bounded by the context's timeout)
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  struct Transfer {
    bool send = true;
    int peer = -1;  // -1 on a receive: any source (set once a message is matched)
    char* data = nullptr;
    int64_t bytes = 0;
    int64_t tag = 0;
    std::chrono::steady_clock::time_point deadline;
    // progress
    bool header_done = false;
    int64_t done = 0;
  };
  // Advances t as far as possible without waiting; true when it is complete. Throws Failure on an
  // error (a tag or size that disagrees, a broken pair) or once t's deadline has passed.
  bool step(Transfer& t);
  // Whether an earlier transfer `a` must finish before `b` may move (same direction and peer).
  static bool ordered(const Transfer& a, const Transfer& b);

 private:
  bool step_send(Transfer& t);
  bool step_recv(Transfer& t);
  [[noreturn]] void overdue(const Transfer& t) const;

  fluxcpp_async_send_recv_t op_ = nullptr;
  int rank_, size_;
  std::vector<char> tail_;  // an odd final byte's 2-byte unit
  // Per peer: why receiving from it failed for good (a header that disagreed leaves its chunks
  // queued, so nothing after it can be read in order); "" while it works.
  std::vector<std::string> recv_broken_;
};

}  // namespace fluxcpp::backend
