// AsyncSendRecv: the receive side (recv, probe): a host peer's message from its slot in our
// segment, another host's from the network channel.
#include <algorithm>
#include <cstring>

#include "comm/drive_wait.hpp"
#include "error_util.hpp"
#include "ops/async_send_recv.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp {
namespace detail {

int64_t AsyncSendRecvImpl::recv(int src, void* out, int64_t out_rows) {
  ops::ContextEntry entry(*ctx_, kOp);
  check_open("recv");
  Pair& p = pair("recv", "src", src);
  FLUXCPP_CHECK_ARG(out_rows >= 0, "{}: recv from rank {}: out_rows={} must be >= 0 (rank {})", kOp,
                    src, out_rows, ctx_->topo().world_rank());
  FLUXCPP_CHECK_ARG(out_rows == 0 || out != nullptr,
                    "{}: recv from rank {}: out is NULL with out_rows={} (rank {})", kOp, src,
                    out_rows, ctx_->topo().world_rank());
  check_intact(p.recv_broken, "recv from", src);
  const SteadyTime deadline = ctx_->runtime().deadline();
  if (p.local >= 0) return recv_local(p, out, out_rows, deadline);
  try {
    return recv_net(p, out, out_rows, deadline);
  } catch (const Error& e) {
    if (e.code() == Errc::kMpi && p.recv_broken.empty()) p.recv_broken = e.what();
    throw;
  }
}

int64_t AsyncSendRecvImpl::recv_local(Pair& p, void* out, int64_t out_rows, SteadyTime deadline) {
  const uint64_t q = p.received + 1;
  const int s = static_cast<int>((q - 1) % static_cast<uint64_t>(slots_));
  uint64_t seen = 0;
  if (!wait(arrived_.at(p.local, p.theirs), q, deadline, &seen))
    timeout(p.recv_broken,
            fmt::format("{}: recv from rank {}: message {} has not arrived; observed arrived = {} "
                        "after {} s (rank {})",
                        kOp, p.rank, q, seen, ctx_->runtime().config().timeout_s,
                        ctx_->topo().world_rank()));
  const auto m = static_cast<int64_t>(
      rows_.at(p.local, p.theirs * slots_ + s).value.load(std::memory_order_acquire));
  FLUXCPP_CHECK_ARG(m <= out_rows,
                    "{}: recv from rank {}: message {} has m={} rows but out_rows={}; it stays "
                    "queued (rank {})",
                    kOp, p.rank, q, m, out_rows, ctx_->topo().world_rank());
  if (m > 0)
    std::memcpy(out, out_.at(p.local, p.theirs * slots_ + s), static_cast<std::size_t>(m) * row_);
  p.received = q;
  shm::signal_set(released_.at(self_, p.mine), q);
  return m;
}

int64_t AsyncSendRecvImpl::recv_net(Pair& p, void* out, int64_t out_rows, SteadyTime deadline) {
  const uint64_t q = p.received + 1;
  comm::Backoff backoff(comm::point_to_point(ctx_->runtime().wait_policy()));
  std::size_t bytes = 0;
  while (!net_->probe(p.net, &bytes)) {
    if (std::chrono::steady_clock::now() >= deadline)
      timeout(p.recv_broken,
              fmt::format("{}: recv from rank {}: message {} has not arrived; observed received = "
                          "{} after {} s (rank {})",
                          kOp, p.rank, q, p.received, ctx_->runtime().config().timeout_s,
                          ctx_->topo().world_rank()));
    backoff.pause();
  }
  const auto m = static_cast<int64_t>(bytes / row_);
  FLUXCPP_CHECK_ARG(m <= out_rows,
                    "{}: recv from rank {}: message {} has m={} rows but out_rows={}; it stays "
                    "queued (rank {})",
                    kOp, p.rank, q, m, out_rows, ctx_->topo().world_rank());
  net_->start_recv(p.net, bytes);
  while (!net_->recv_done(p.net)) {
    if (std::chrono::steady_clock::now() >= deadline)
      timeout(p.recv_broken,
              fmt::format("{}: recv from rank {}: message {} ({} bytes) was matched but has not "
                          "landed after {} s; observed received = {} (rank {})",
                          kOp, p.rank, q, bytes, ctx_->runtime().config().timeout_s, p.received,
                          ctx_->topo().world_rank()));
    backoff.pause();
  }
  if (bytes > 0) std::memcpy(out, net_->inbox(p.net), bytes);
  p.received = q;
  return m;
}

int64_t AsyncSendRecvImpl::probe(int src) {
  ops::ContextEntry entry(*ctx_, kOp);
  check_open("probe");
  Pair& p = pair("probe", "src", src);
  check_intact(p.recv_broken, "probe of", src);
  if (p.local < 0) {
    std::size_t bytes = 0;
    try {
      return net_->probe(p.net, &bytes) ? static_cast<int64_t>(bytes / row_) : -1;
    } catch (const Error& e) {
      p.recv_broken = e.what();
      throw;
    }
  }
  if (net_) net_->progress();
  const uint64_t q = p.received + 1;
  if (shm::signal_load(arrived_.at(p.local, p.theirs)) < q) return -1;
  const int s = static_cast<int>((q - 1) % static_cast<uint64_t>(slots_));
  return static_cast<int64_t>(
      rows_.at(p.local, p.theirs * slots_ + s).value.load(std::memory_order_acquire));
}

}  // namespace detail
}  // namespace fluxcpp
