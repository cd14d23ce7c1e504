// AsyncSendRecv: the send side (send, isend, send_wait, send_test, send_ready) and what both sides
// share; the receive side is in async_send_recv_recv.cpp, create in async_send_recv_setup.cpp.
#include "ops/async_send_recv.hpp"

#include <algorithm>
#include <cstring>

#include "comm/backoff.hpp"
#include "comm/drive_wait.hpp"
#include "error_util.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp {
namespace detail {

namespace {

std::string list_text(const std::vector<int>& v) {
  return v.empty() ? std::string("none") : fmt::format("{}", fmt::join(v, ", "));
}
}  // namespace

void AsyncSendRecvImpl::check_open(const char* fn) const {
  ctx_->life().check_usable(kOp);
  if (closed_) raise(Errc::kInvalidUsage, "{}: {}: the op was destroyed", kOp, fn);
}

void AsyncSendRecvImpl::check_intact(const std::string& broken, const std::string& where,
                                     int peer) const {
  if (!broken.empty())
    raise(Errc::kInvalidUsage, "{}: {} rank {}: the pair failed earlier: {}", kOp, where, peer,
          broken);
}

AsyncSendRecvImpl::Pair& AsyncSendRecvImpl::pair(const char* fn, const char* arg, int peer) {
  for (auto& p : pairs_)
    if (p->rank == peer) return *p;
  raise(Errc::kInvalidArgument, "{}: {}: {}={} is not a peer of rank {} (peers: {})", kOp, fn, arg,
        peer, ctx_->topo().world_rank(), list_text(peers_));
}

void AsyncSendRecvImpl::timeout(std::string& broken, const std::string& msg) {
  broken = msg;
  throw Error(Errc::kTimeout, msg);
}

bool AsyncSendRecvImpl::wait(const shm::Signal& s, uint64_t target, SteadyTime deadline,
                             uint64_t* observed) {
  // Messages of ours in flight across hosts may move only while someone drives the network (MPI
  // does), and a comm stream may post one while we wait: poll it while anything is in flight,
  // and otherwise sleep on the signal in slices of 1 ms, looking again between them.
  const shm::WaitPolicy policy = ctx_->runtime().wait_policy();
  comm::P2pNet* net = net_ && net_->size() > 0 ? net_.get() : nullptr;
  return comm::wait_driving(net, s, target, deadline,
                            {policy, comm::point_to_point(policy), std::chrono::milliseconds(1)},
                            observed);
}

void AsyncSendRecvImpl::deliver(Pair& p, uint64_t q, const char* data, std::size_t bytes,
                                int64_t m) noexcept {
  const int s = static_cast<int>((q - 1) % static_cast<uint64_t>(slots_));
  if (p.local >= 0) {
    const int me = self_;
    if (bytes > 0) std::memcpy(out_.at(me, p.mine * slots_ + s), data, bytes);
    rows_.at(me, p.mine * slots_ + s)
        .value.store(static_cast<uint64_t>(m), std::memory_order_relaxed);
    shm::signal_set(arrived_.at(me, p.mine), q);
  } else {
    if (bytes > 0) std::memcpy(net_->staging(p.net, q), data, bytes);
    net_->ready(p.net, q, bytes);
  }
  shm::signal_set(p.copied, q);
}

uint64_t AsyncSendRecvImpl::send(int dst, const void* data, int64_t m, bool async) {
  const char* fn = async ? "isend" : "send";
  ops::ContextEntry entry(*ctx_, kOp);
  check_open(fn);
  const int r = ctx_->topo().world_rank();
  Pair& p = pair(fn, "dst", dst);
  FLUXCPP_CHECK_ARG(m >= 0 && m <= opts_.max_m,
                    "{}: {} to rank {}: m={} must be in [0, {}] (rank {})", kOp, fn, dst, m,
                    opts_.max_m, r);
  FLUXCPP_CHECK_ARG(m == 0 || data != nullptr,
                    "{}: {} to rank {}: data is NULL with m={} (rank {})", kOp, fn, dst, m, r);
  check_intact(p.send_broken, fmt::format("{} to", fn), dst);
  const uint64_t q = p.sent + 1;
  const uint64_t S = static_cast<uint64_t>(slots_);
  const std::size_t bytes = static_cast<std::size_t>(m) * row_;
  const SteadyTime deadline = ctx_->runtime().deadline();
  const double tmo = ctx_->runtime().config().timeout_s;
  uint64_t seen = 0;
  if (q > S && p.local >= 0) {
    if (!wait(released_.at(p.local, p.theirs), q - S, deadline, &seen))
      timeout(p.send_broken,
              fmt::format("{}: {} to rank {}: message {} waits for slot {}, free once rank {} has "
                          "released message {}; observed released = {} after {} s (rank {})",
                          kOp, fn, dst, q, (q - 1) % S, dst, q - S, seen, tmo, r));
  } else if (q > S) {
    comm::Backoff backoff(comm::point_to_point(ctx_->runtime().wait_policy()));
    for (;;) {
      seen = net_->completed(p.net);
      const std::string err = net_->send_error(p.net);
      if (!err.empty()) {
        p.send_broken = err;
        raise(Errc::kMpi, "{}: {} to rank {}: {} (rank {})", kOp, fn, dst, err, r);
      }
      if (seen >= q - S) break;
      if (std::chrono::steady_clock::now() >= deadline)
        timeout(p.send_broken,
                fmt::format("{}: {} to rank {}: message {} waits for slot {}, free once rank {} "
                            "has matched message {}; observed matched = {} after {} s (rank {})",
                            kOp, fn, dst, q, (q - 1) % S, dst, q - S, seen, tmo, r));
      backoff.pause();
    }
  }
  if (async && p.stream >= 0) {
    Pair* pp = &p;
    const char* src = static_cast<const char*>(data);
    p.ticket = ctx_->runtime().comm_stream(p.stream).enqueue(
        [this, pp, q, src, bytes, m] { deliver(*pp, q, src, bytes, m); });
  } else {
    // An isend still copying goes first: messages are published in order.
    if (shm::signal_load(p.copied) < p.sent && !wait(p.copied, p.sent, deadline, &seen))
      timeout(p.send_broken,
              fmt::format("{}: {} to rank {}: the copy of message {} on the comm stream did not "
                          "finish; observed copied = {} after {} s (rank {})",
                          kOp, fn, dst, p.sent, seen, tmo, r));
    deliver(p, q, static_cast<const char*>(data), bytes, m);
  }
  p.sent = q;
  return q;
}

AsyncSendRecvImpl::Pair& AsyncSendRecvImpl::sent_pair(const char* fn, int dst, uint64_t seq) {
  check_open(fn);
  Pair& p = pair(fn, "dst", dst);
  FLUXCPP_CHECK_ARG(seq >= 1 && seq <= p.sent,
                    "{}: {}: message {} to rank {} was never sent ({} sent; rank {})", kOp, fn, seq,
                    dst, p.sent, ctx_->topo().world_rank());
  if (net_) net_->progress();
  return p;
}

void AsyncSendRecvImpl::send_wait(int dst, uint64_t seq) {
  ops::ContextEntry entry(*ctx_, kOp);
  Pair& p = sent_pair("send_wait", dst, seq);
  if (shm::signal_load(p.copied) >= seq) return;
  check_intact(p.send_broken, "send_wait to", dst);
  uint64_t seen = 0;
  if (!wait(p.copied, seq, ctx_->runtime().deadline(), &seen))
    timeout(p.send_broken,
            fmt::format("{}: send_wait to rank {}: the copy of message {} did not finish; "
                        "observed copied = {} after {} s (rank {})",
                        kOp, dst, seq, seen, ctx_->runtime().config().timeout_s,
                        ctx_->topo().world_rank()));
}

bool AsyncSendRecvImpl::send_test(int dst, uint64_t seq) {
  ops::ContextEntry entry(*ctx_, kOp);
  return shm::signal_load(sent_pair("send_test", dst, seq).copied) >= seq;
}

bool AsyncSendRecvImpl::send_ready(int dst) {
  ops::ContextEntry entry(*ctx_, kOp);
  check_open("send_ready");
  Pair& p = pair("send_ready", "dst", dst);
  check_intact(p.send_broken, "send_ready to", dst);
  const uint64_t q = p.sent + 1;
  const uint64_t S = static_cast<uint64_t>(slots_);
  if (q <= S) return true;
  if (p.local >= 0) return shm::signal_load(released_.at(p.local, p.theirs)) >= q - S;
  net_->progress();
  const std::string err = net_->send_error(p.net);
  if (!err.empty()) {
    p.send_broken = err;
    raise(Errc::kMpi, "{}: send_ready to rank {}: {} (rank {})", kOp, dst, err,
          ctx_->topo().world_rank());
  }
  return net_->completed(p.net) >= q - S;
}

}  // namespace detail

AsyncSendRecv::AsyncSendRecv(const Context& ctx, const AsyncSendRecvOptions& options)
    : impl_(std::make_unique<detail::AsyncSendRecvImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(AsyncSendRecv, AsyncSendRecvOptions);

uint64_t AsyncSendRecv::send(int dst, const void* data, int64_t m) {
  return ops::checked(impl_).send(dst, data, m, false);
}
uint64_t AsyncSendRecv::isend(int dst, const void* data, int64_t m) {
  return ops::checked(impl_).send(dst, data, m, true);
}
void AsyncSendRecv::send_wait(int dst, uint64_t seq) {
  ops::checked(impl_).send_wait(dst, seq);
}
bool AsyncSendRecv::send_test(int dst, uint64_t seq) {
  return ops::checked(impl_).send_test(dst, seq);
}
int64_t AsyncSendRecv::recv(int src, void* out, int64_t out_rows) {
  return ops::checked(impl_).recv(src, out, out_rows);
}
bool AsyncSendRecv::send_ready(int dst) {
  return ops::checked(impl_).send_ready(dst);
}

int64_t AsyncSendRecv::probe(int src) {
  return ops::checked(impl_).probe(src);
}
void AsyncSendRecv::close() {
  if (impl_) impl_->close();
}
const std::vector<int>& AsyncSendRecv::peers() const {
  return ops::checked(impl_).peers();
}

}  // namespace fluxcpp
