#include "ops/core/reduce_exchange.hpp"

#include <cstring>

#include "comm/group.hpp"
#include "error_util.hpp"
#include "kernels/reduce.hpp"

namespace fluxcpp::ops {

ReduceExchange::ReduceExchange(const comm::Parts& c, const Links& links, shm::Layout& layout,
                               std::size_t max_share_block, std::size_t max_acc_block, bool needed,
                               const char* op)
    : c_(&c), links_(&links) {
  const int W = links.world(), N = links.hosts();
  shares_ = layout.slots("shares", needed ? 1 : 0, max_share_block * W);
  share_ready_ = layout.signals("share-ready", W);
  host_out_ = layout.slots("host-out", N > 1 ? N : 0, max_acc_block);
  host_in_ = layout.slots("host-in", N > 1 ? N : 0, max_acc_block);
  out_ready_ = layout.signals("host-out-ready", N > 1 ? N : 0);
  in_landed_ = layout.signals("host-in-landed", N > 1 ? N : 0);
  for (int t = 0; t < W; ++t)
    if (links.link(t).local != links.local()) peer_blocks_.push_back(t);
  if (N > 1)
    comm::agree(c.control(),
                [&] { resize_or_raise(host_sum_, max_acc_block, op, "the host sum"); });
}

bool ReduceExchange::sends_direct() const {
  return links_->host_size() == 1 && links_->networked();
}

void ReduceExchange::begin(OpCore& core, std::size_t share_block, std::size_t acc_block,
                           bool direct) {
  const Links& l = *links_;
  core_ = &core;
  share_block_ = share_block;
  acc_block_ = acc_block;
  direct_ = direct && sends_direct();
  share_base_ = share_tally_.begin(share_block);
  out_base_ = out_tally_.begin(acc_block);
  in_base_ = in_tally_.begin(acc_block);
  if (!l.networked()) return;
  const int me = l.local();
  constexpr int kTag = static_cast<int>(WireTag::kReduce);
  std::vector<comm::Transport::Transfer> t;
  for (int n : l.next_hosts()) {
    const int peer = l.rail(n);
    t.push_back(
        {false, peer, kTag, host_in_.at(me, n), acc_block, &in_landed_.at(me, n), in_base_});
    if (direct_)
      t.push_back({true, peer, kTag, shares() + share_block * peer, acc_block,
                   &share_ready_.at(me, peer), share_base_});
    else
      t.push_back(
          {true, peer, kTag, host_out_.at(me, n), acc_block, &out_ready_.at(me, n), out_base_});
  }
  core.transport()->post(std::move(t));
}

Outbox ReduceExchange::share(int t) const {
  return Outbox(core_, shares() + share_block_ * t, share_block_,
                &share_ready_.at(links_->local(), t), share_base_);
}

Inbox ReduceExchange::share_of(int q, int t) const {
  return Inbox(core_, links_->member(q), shares_.at(q) + share_block_ * t, share_block_,
               &share_ready_.at(q, t), share_base_, &share_ready_, t, q);
}

Inbox ReduceExchange::host_sum_of(int h) const {
  const int me = links_->local();
  return Inbox(core_, links_->rail(h), host_in_.at(me, h), acc_block_, &in_landed_.at(me, h),
               in_base_, &in_landed_, h, me);
}

void ReduceExchange::reduce_range(DType acc, DType out_dtype, int64_t e0, int64_t e1,
                                  const void* own, void* output) {
  if (e1 <= e0) return;
  const int N = links_->hosts();
  const std::size_t esz = dtype_size(acc);
  std::vector<const void*> hosts(N);
  for (int n = 0; n < N; ++n) {
    if (n == links_->host()) {
      hosts[n] = static_cast<const char*>(own) + e0 * esz;
      continue;
    }
    const Inbox in = host_sum_of(n);
    in.wait(static_cast<std::size_t>(e1) * esz);
    hosts[n] = in.data() + e0 * esz;
  }
  kernels::reduce_sum(acc, hosts.data(), N, out_dtype,
                      static_cast<char*>(output) + e0 * dtype_size(out_dtype), e1 - e0);
}

void ReduceExchange::reduce_host_range(DType dtype, int64_t e0, int64_t e1, const void* own,
                                       void* output) const {
  if (e1 <= e0) return;
  const Links& l = *links_;
  const std::size_t esz = dtype_size(dtype);
  const std::vector<int>& order = l.sum_order();
  std::vector<const void*> srcs(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int q = order[i];
    if (q == l.local()) {
      srcs[i] = static_cast<const char*>(own) + e0 * esz;
      continue;
    }
    const Inbox in = share_of(q, l.rank());
    in.wait(static_cast<std::size_t>(e1) * esz);
    srcs[i] = in.data() + e0 * esz;
  }
  kernels::reduce_sum(dtype, srcs.data(), static_cast<int>(srcs.size()), dtype,
                      static_cast<char*>(output) + e0 * esz, e1 - e0);
}

std::vector<const void*> ReduceExchange::host_shares(
    int t, const std::function<const void*(int t)>& own) const {
  const std::vector<int>& order = links_->sum_order();
  std::vector<const void*> srcs(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int q = order[i];
    if (q == links_->local()) {
      srcs[i] = own(t);
    } else {
      const Inbox in = share_of(q, t);
      in.wait_all();
      srcs[i] = in.data();
    }
  }
  return srcs;
}

void ReduceExchange::reduce(DType share_dtype, DType acc, DType out_dtype, int64_t count,
                            const std::function<const void*(int t)>& own, void* output) {
  const Links& l = *links_;
  const int N = l.hosts(), L = l.host_size(), r = l.rank(), me = l.local();
  if (N == 1) {
    std::vector<const void*> srcs = host_shares(r, own);
    kernels::reduce_sum(share_dtype, srcs.data(), L, out_dtype, output, count);
    return;
  }
  // This host's sums for the ranks with our local rank on the other hosts first: they cross the
  // link while we sum our own block.
  for (int n : l.next_hosts()) {
    if (direct_) break;
    std::vector<const void*> srcs = host_shares(l.rail(n), own);
    kernels::reduce_sum(share_dtype, srcs.data(), L, acc, host_out_.at(me, n), count);
    shm::signal_max(out_ready_.at(me, n), out_base_ + acc_block_);
    core_->poll();
  }
  // This host's sum of our block (alone on the host with shares in the accumulation type: the
  // share itself — the same bits without a copy).
  std::vector<const void*> srcs = host_shares(r, own);
  const void* mine = srcs[0];
  if (L > 1 || share_dtype != acc) {
    kernels::reduce_sum(share_dtype, srcs.data(), L, acc, host_sum_.data(), count);
    mine = host_sum_.data();
  }
  std::vector<const void*> hosts(N);
  for (int n = 0; n < N; ++n) {
    if (n == l.host()) {
      hosts[n] = mine;
      continue;
    }
    const Inbox in = host_sum_of(n);
    in.wait_all();
    hosts[n] = in.data();
  }
  kernels::reduce_sum(acc, hosts.data(), N, out_dtype, output, count);
}

bool ReduceExchange::networked() const {
  return links_->networked();
}

void ReduceExchange::allow_presum(std::size_t max_acc_block, const char* op) {
  const bool qualifies =
      !links_->networked() && links_->host_size() > 2 && c_->runtime().config().copy_offload;
  comm::agree(c_->control(), [&] {
    if (qualifies) resize_or_raise(presum_, max_acc_block, op, "the offloaded partial sum");
  });
}

void ReduceExchange::start_presum(Offload& copies, DType acc, int64_t count) {
  const int L = links_->host_size(), r = links_->rank();
  copies.start([this, &copies, acc, count, L, r] {
    char* sum = presum_.data();
    for (int i = 0; i < L - 1; ++i) {
      const Inbox in = share_of(links_->sum_order()[i], r);
      in.wait_all(copies.stop());
      if (i == 0) {
        std::memcpy(sum, in.data(), static_cast<std::size_t>(count) * dtype_size(acc));
      } else {
        const void* srcs[2] = {sum, in.data()};
        kernels::reduce_sum(acc, srcs, 2, acc, sum, count);
      }
    }
  });
}

void ReduceExchange::finish_presum(Offload& copies, DType acc, const void* own, DType out_dtype,
                                   void* output, int64_t count) {
  copies.finish();
  const void* srcs[2] = {presum_.data(), own};
  kernels::reduce_sum(acc, srcs, 2, out_dtype, output, count);
}

void ReduceExchange::sum_payloads(const OpCore& core, DType acc, DType out_dtype,
                                  std::size_t block, int64_t count, void* output) const {
  const Links& l = *links_;
  const int r = l.rank();
  std::vector<const void*> srcs;
  if (!l.networked()) {
    for (int q : l.sum_order()) srcs.push_back(core.handshake().payload(q) + block * r);
  } else {  // one rank per host (the only payload across hosts): by host, as reduce() adds them
    // Another host's payload is our block alone when it came in parts, else its whole partial.
    const Handshake& hs = core.handshake();
    for (int n = 0; n < l.hosts(); ++n)
      srcs.push_back(hs.payload_of(l.rank_of(n, 0)) +
                     (hs.payload_parted() && n != l.host() ? 0 : block * r));
  }
  kernels::reduce_sum(acc, srcs.data(), static_cast<int>(srcs.size()), out_dtype, output, count);
}

}  // namespace fluxcpp::ops
