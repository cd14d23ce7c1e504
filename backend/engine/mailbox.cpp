// Mailbox: chunked, tagged messages over AsyncSendRecv, advanced without blocking.
#include "mailbox.hpp"

#include <algorithm>
#include <cstring>

namespace fluxcpp::backend {
namespace {

constexpr int64_t kChunk = int64_t{1} << 20;  // bytes per message of the op
constexpr int kSlots = 4;
constexpr int64_t kUnit = 2;  // the op moves bf16 units
constexpr int64_t kHeaderUnits = 8;

struct Header {
  int64_t tag, bytes;
};

}  // namespace

Mailbox::Mailbox(fluxcpp_context_t ctx, int rank, int size)
    : rank_(rank), size_(size), recv_broken_(size) {
  if (size < 2) return;
  std::vector<int> peers;
  for (int r = 0; r < size; ++r)
    if (r != rank) peers.push_back(r);
  check(fluxcpp_async_send_recv_create(ctx, kChunk / kUnit, 1, FLUXCPP_BFLOAT16, kSlots,
                                       static_cast<int>(peers.size()), peers.data(), &op_),
        "send/recv create");
}

Mailbox::~Mailbox() { fluxcpp_async_send_recv_destroy(op_); }

bool Mailbox::ordered(const Transfer& a, const Transfer& b) {
  if (a.send != b.send) return false;
  if (a.send) return a.peer == b.peer;
  return a.peer < 0 || b.peer < 0 || a.peer == b.peer;  // any-source receives keep their order
}

void Mailbox::overdue(const Transfer& t) const {
  const std::string what =
      t.send ? "send to rank " + std::to_string(t.peer)
             : t.peer < 0 ? std::string("recv from any rank")
                          : "recv from rank " + std::to_string(t.peer);
  throw Failure(FLUXCPP_ERROR_TIMEOUT,
                "fluxcpp backend: " + what + " (tag " + std::to_string(t.tag) + ", " +
                    std::to_string(t.bytes) + " bytes): Timed out: not complete within the "
                    "group's timeout; " +
                    std::to_string(t.done) + " bytes moved (rank " + std::to_string(rank_) + ")");
}

bool Mailbox::step(Transfer& t) {
  if (op_ == nullptr)
    throw Failure(FLUXCPP_ERROR_INVALID_ARGUMENT,
                  "fluxcpp backend: send/recv: a group of one rank has no peer");
  const bool complete = t.send ? step_send(t) : step_recv(t);
  if (!complete && std::chrono::steady_clock::now() > t.deadline) overdue(t);
  return complete;
}

bool Mailbox::step_send(Transfer& t) {
  for (;;) {
    if (t.header_done && t.done == t.bytes) return true;
    int ready = 0;
    check(fluxcpp_async_send_recv_send_ready(op_, t.peer, &ready), "send");
    if (!ready) return false;
    if (!t.header_done) {
      Header h{t.tag, t.bytes};
      int64_t units[2] = {};  // kHeaderUnits bf16 units
      std::memcpy(units, &h, sizeof h);
      check(fluxcpp_async_send_recv_send(op_, t.peer, units, kHeaderUnits, nullptr), "send");
      t.header_done = true;
      continue;
    }
    const int64_t n = std::min(kChunk, t.bytes - t.done);
    const char* src = t.data + t.done;
    if (n % kUnit != 0) {  // the last chunk of an odd count: copy it with a pad byte
      tail_.assign(n + 1, 0);
      std::memcpy(tail_.data(), src, n);
      src = tail_.data();
    }
    check(fluxcpp_async_send_recv_send(op_, t.peer, src, (n + 1) / kUnit, nullptr), "send");
    t.done += n;
  }
}

bool Mailbox::step_recv(Transfer& t) {
  for (;;) {
    if (t.header_done && t.done == t.bytes) return true;
    if (!t.header_done && t.peer < 0) {  // any source: the first peer with a message
      for (int r = 0; r < size_ && t.peer < 0; ++r) {
        if (r == rank_) continue;
        int64_t m = -1;
        check(fluxcpp_async_send_recv_probe(op_, r, &m), "recv");
        if (m >= 0) t.peer = r;
      }
      if (t.peer < 0) return false;
    }
    if (!recv_broken_[t.peer].empty())
      throw Failure(FLUXCPP_ERROR_INVALID_USAGE, "fluxcpp backend: recv from rank " +
                                                    std::to_string(t.peer) +
                                                    ": receiving from it failed earlier: " +
                                                    recv_broken_[t.peer]);
    int64_t m = -1;
    check(fluxcpp_async_send_recv_probe(op_, t.peer, &m), "recv");
    if (m < 0) return false;
    if (!t.header_done) {
      int64_t units[2] = {};  // kHeaderUnits bf16 units
      check(fluxcpp_async_send_recv_recv(op_, t.peer, units, kHeaderUnits, &m), "recv");
      Header h;
      std::memcpy(&h, units, sizeof h);
      if (m != kHeaderUnits || h.bytes != t.bytes || h.tag != t.tag) {
        recv_broken_[t.peer] = "rank " + std::to_string(t.peer) + " sent tag " +
                               std::to_string(h.tag) + " and " + std::to_string(h.bytes) +
                               " bytes; rank " + std::to_string(rank_) + " expects tag " +
                               std::to_string(t.tag) + " and " + std::to_string(t.bytes) + " bytes";
        throw Failure(FLUXCPP_ERROR_INVALID_ARGUMENT,
                      "fluxcpp backend: recv from rank " + std::to_string(t.peer) +
                          ": the message has tag " + std::to_string(h.tag) + " and " +
                          std::to_string(h.bytes) + " bytes; this rank expects tag " +
                          std::to_string(t.tag) + " and " + std::to_string(t.bytes) +
                          " bytes (rank " + std::to_string(rank_) + "; tags must match in "
                          "order: later receives from that rank fail)");
      }
      t.header_done = true;
      continue;
    }
    const int64_t n = std::min(kChunk, t.bytes - t.done);
    const int64_t units = (n + 1) / kUnit;
    char* dst = t.data + t.done;
    if (n % kUnit != 0) tail_.assign(n + 1, 0), dst = tail_.data();
    check(fluxcpp_async_send_recv_recv(op_, t.peer, dst, units, &m), "recv");
    if (dst != t.data + t.done) std::memcpy(t.data + t.done, dst, n);
    t.done += n;
  }
}

}  // namespace fluxcpp::backend
