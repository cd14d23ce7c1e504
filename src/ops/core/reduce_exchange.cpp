#include "ops/core/reduce_exchange.hpp"

#include <cstring>

#include "comm/group.hpp"
#include "error_util.hpp"
#include "kernels/reduce.hpp"

namespace fluxcpp::ops {

namespace {
constexpr int kReduceTag = 3;
}  // namespace

ReduceExchange::ReduceExchange(detail::ContextImpl& c, shm::Layout& layout,
                               std::size_t max_share_block, std::size_t max_acc_block, bool needed,
                               const char* op)
    : c_(&c) {
  const int W = c.world_size(), N = c.num_nodes();
  shares_ = layout.slots("shares", needed ? 1 : 0, max_share_block * W);
  share_ready_ = layout.signals("share-ready", W);
  host_out_ = layout.slots("host-out", N > 1 ? N : 0, max_acc_block);
  host_in_ = layout.slots("host-in", N > 1 ? N : 0, max_acc_block);
  out_ready_ = layout.signals("host-out-ready", N > 1 ? N : 0);
  in_landed_ = layout.signals("host-in-landed", N > 1 ? N : 0);
  for (int t = 0; t < W; ++t)
    if (c.local_of(t) != c.node_rank()) peer_blocks_.push_back(t);
  if (N > 1)
    comm::agree(c.comm(), [&] { resize_or_raise(host_sum_, max_acc_block, op, "the host sum"); });
}

void ReduceExchange::begin(OpCore& core, std::size_t share_block, std::size_t acc_block,
                           bool direct) {
  core_ = &core;
  share_block_ = share_block;
  acc_block_ = acc_block;
  direct_ = direct && c_->node_size() == 1 && c_->num_nodes() > 1;
  share_base_ = share_tally_.begin(share_block);
  out_base_ = out_tally_.begin(acc_block);
  in_base_ = in_tally_.begin(acc_block);
  const int N = c_->num_nodes();
  if (N == 1) return;
  const int me = c_->node_rank(), nid = c_->node_id();
  std::vector<comm::Transport::Transfer> t;
  for (int i = 1; i < N; ++i) {
    const int n = (nid + i) % N, peer = c_->world_rank_of(n, me);
    t.push_back(
        {false, peer, kReduceTag, host_in_.at(me, n), acc_block, &in_landed_.at(me, n), in_base_});
    if (direct_)
      t.push_back({true, peer, kReduceTag, shares() + share_block * peer, acc_block,
                   &share_ready_.at(me, peer), share_base_});
    else
      t.push_back(
          {true, peer, kReduceTag, host_out_.at(me, n), acc_block, &out_ready_.at(me, n), out_base_});
  }
  core.transport()->post(std::move(t));
}

Outbox ReduceExchange::share(int t) const {
  return Outbox(core_, shares() + share_block_ * t, share_block_, &share_ready_.at(c_->node_rank(), t),
                share_base_);
}

Inbox ReduceExchange::share_of(int q, int t) const {
  return Inbox(core_, c_->world_rank_of(c_->node_id(), q), shares_.at(q) + share_block_ * t,
               share_block_, &share_ready_.at(q, t), share_base_, &share_ready_, t, q);
}

void ReduceExchange::reduce_range(DType acc, DType out_dtype, int64_t e0, int64_t e1,
                                  const void* own, void* output) {
  if (e1 <= e0) return;
  const int N = c_->num_nodes(), me = c_->node_rank(), nid = c_->node_id();
  const std::size_t esz = dtype_size(acc);
  std::vector<const void*> hosts(N);
  for (int n = 0; n < N; ++n) {
    if (n == nid) {
      hosts[n] = static_cast<const char*>(own) + e0 * esz;
      continue;
    }
    const Inbox in(core_, c_->world_rank_of(n, me), host_in_.at(me, n), acc_block_,
                   &in_landed_.at(me, n), in_base_, &in_landed_, n, me);
    in.wait(static_cast<std::size_t>(e1) * esz);
    hosts[n] = in.data() + e0 * esz;
  }
  kernels::reduce_sum(acc, hosts.data(), N, out_dtype,
                      static_cast<char*>(output) + e0 * dtype_size(out_dtype), e1 - e0);
}

std::vector<const void*> ReduceExchange::host_shares(
    int t, const std::function<const void*(int t)>& own) const {
  const int L = c_->node_size(), me = c_->node_rank();
  std::vector<const void*> srcs(L);
  for (int i = 0; i < L; ++i) {
    const int q = host_sum_order(me, L, i);
    if (q == me) {
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
  const int N = c_->num_nodes(), me = c_->node_rank(), nid = c_->node_id();
  const int L = c_->node_size(), r = c_->world_rank();
  if (N == 1) {
    std::vector<const void*> srcs = host_shares(r, own);
    kernels::reduce_sum(share_dtype, srcs.data(), L, out_dtype, output, count);
    return;
  }
  // This host's sums for the ranks with our local rank on the other hosts first: they cross the
  // link while we sum our own block.
  for (int i = 1; i < N && !direct_; ++i) {
    const int n = (nid + i) % N;
    std::vector<const void*> srcs = host_shares(c_->world_rank_of(n, me), own);
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
    if (n == nid) {
      hosts[n] = mine;
      continue;
    }
    const Inbox in(core_, c_->world_rank_of(n, me), host_in_.at(me, n), acc_block_,
                   &in_landed_.at(me, n), in_base_, &in_landed_, n, me);
    in.wait_all();
    hosts[n] = in.data();
  }
  kernels::reduce_sum(acc, hosts.data(), N, out_dtype, output, count);
}

bool ReduceExchange::networked() const { return c_->num_nodes() > 1; }

void ReduceExchange::allow_presum(std::size_t max_acc_block, const char* op) {
  const bool qualifies =
      c_->num_nodes() == 1 && c_->node_size() > 2 && c_->config().copy_offload;
  comm::agree(c_->comm(), [&] {
    if (qualifies) resize_or_raise(presum_, max_acc_block, op, "the offloaded partial sum");
  });
}

void ReduceExchange::start_presum(Offload& copies, DType acc, int64_t count) {
  const int L = c_->node_size(), me = c_->node_rank(), r = c_->world_rank();
  copies.start([this, &copies, acc, count, L, me, r] {
    char* sum = presum_.data();
    for (int i = 0; i < L - 1; ++i) {
      const Inbox in = share_of(host_sum_order(me, L, i), r);
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
  const int N = c_->num_nodes(), L = c_->node_size(), me = c_->node_rank(), r = c_->world_rank();
  std::vector<const void*> srcs;
  if (N == 1) {
    for (int i = 0; i < L; ++i)
      srcs.push_back(core.handshake().payload(host_sum_order(me, L, i)) + block * r);
  } else {  // one rank per host (the only payload across hosts): by host, as reduce() adds them
    for (int n = 0; n < N; ++n)
      srcs.push_back(core.handshake().payload_of(c_->world_rank_of(n, 0)) + block * r);
  }
  kernels::reduce_sum(acc, srcs.data(), static_cast<int>(srcs.size()), out_dtype, output, count);
}

}  // namespace fluxcpp::ops
