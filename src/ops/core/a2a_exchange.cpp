#include "ops/core/a2a_exchange.hpp"

#include <algorithm>

#include "ops/core/peer_order.hpp"
#include "ops/core/single_copy.hpp"

namespace fluxcpp::ops {

namespace {
constexpr int kA2aTag = 1;
}  // namespace

A2aExchange::A2aExchange(detail::ContextImpl& c, shm::Layout& layout, std::size_t out_bytes,
                         std::size_t in_bytes, bool needed)
    : c_(&c) {
  const int W = c.world_size();
  const PeerOrder order(c);
  targets_ = order.send();
  sources_ = order.receive();
  out_ = layout.slots("a2a-out", needed ? 1 : 0, out_bytes);
  in_ = layout.slots("a2a-in", c.num_nodes() > 1 ? 1 : 0, in_bytes);
  out_ready_ = layout.signals("a2a-out-ready", W);
  in_landed_ = layout.signals("a2a-in-landed", c.num_nodes() > 1 ? W : 0);
  sent_.resize(W);
  received_.resize(W);
  send_base_.assign(W, 0);
  recv_base_.assign(W, 0);
  send_bytes_.assign(W, 0);
  send_off_.assign(W, 0);
  recv_bytes_.assign(W, 0);
  recv_off_.assign(W, 0);
}

bool A2aExchange::single_copy(const Plan& plan, const Pull& pull) const {
  const int L = c_->node_size(), nid = c_->node_id();
  if (pull.copy == nullptr || !pull.copy->usable()) return false;
  // Single copy when the host's blocks are large (every rank decides from the same plan).
  std::size_t largest = 0;
  for (int a = 0; a < L; ++a)
    for (int b = 0; b < L; ++b)
      if (a != b)
        largest =
            std::max(largest, plan.bytes(c_->world_rank_of(nid, a), c_->world_rank_of(nid, b)));
  return pull.copy->worth(largest);
}

void A2aExchange::begin(OpCore& core, const Plan& plan) {
  begin(core, plan, Pull());
}

void A2aExchange::begin(OpCore& core, const Plan& plan, const Pull& pull) {
  core_ = &core;
  pull_ = single_copy(plan, pull) ? pull : Pull{};
  const int W = c_->world_size(), r = c_->world_rank();
  for (int p = 0; p < W; ++p) {
    send_bytes_[p] = plan.bytes(r, p);
    send_off_[p] = plan.out_offset(r, p);
    send_base_[p] = sent_[p].begin(send_bytes_[p]);
    recv_bytes_[p] = plan.bytes(p, r);
    recv_base_[p] = received_[p].begin(recv_bytes_[p]);
    // A host peer's block is read in its out slot; another host's lands in our in slot.
    recv_off_[p] = on_host(p) ? plan.out_offset(p, r) : plan.in_offset(p);
  }
  if (c_->num_nodes() == 1) return;
  const int me = c_->node_rank();
  std::vector<comm::Transport::Transfer> t;
  for (int i = 1; i < W; ++i) {  // ring order: receive from r-i, send to r+i
    const int s = (r + W - i) % W, d = (r + i) % W;
    if (!on_host(s))
      t.push_back({false, s, kA2aTag, in_.at(me) + recv_off_[s], recv_bytes_[s], &in_landed_.at(me, s),
                   recv_base_[s]});
    if (!on_host(d))
      t.push_back({true, d, kA2aTag, out_.at(me) + send_off_[d], send_bytes_[d], &out_ready_.at(me, d),
                   send_base_[d]});
  }
  core.transport()->post(std::move(t));
}

Outbox A2aExchange::to(int t) const {
  if (pull_.copy != nullptr && on_host(t)) return Outbox();  // t reads our input itself
  const int me = c_->node_rank();
  return Outbox(core_, out_.count() > 0 ? out_.at(me) + send_off_[t] : nullptr, send_bytes_[t],
                &out_ready_.at(me, t), send_base_[t]);
}

Inbox A2aExchange::from(int s) const {
  const int q = c_->local_of(s);
  if (pull_.copy != nullptr && on_host(s)) {
    const uint64_t input = pull_.input(q);
    if (input == 0) return Inbox::landed(s, out_.at(q) + recv_off_[s], recv_bytes_[s]);
    return Inbox::in_process(s, pull_.copy->pid(q), input + recv_off_[s], recv_bytes_[s]);
  }
  if (on_host(s))
    return Inbox(core_, s, out_.at(q) + recv_off_[s], recv_bytes_[s],
                 &out_ready_.at(q, c_->world_rank()), recv_base_[s], &out_ready_, c_->world_rank(),
                 q);
  const int me = c_->node_rank();
  return Inbox(core_, s, in_.at(me) + recv_off_[s], recv_bytes_[s], &in_landed_.at(me, s),
               recv_base_[s], &in_landed_, s, me);
}

void A2aExchange::receive(const std::function<void(const Inbox&)>& take) const {
  if (pull_.copy != nullptr) pull_.copy->pull(*core_, [&](int, int g) { take(from(g)); });
  for (int s : sources_)
    if (pull_.copy == nullptr || !on_host(s)) take(from(s));
}

Inbox A2aExchange::held(int s, const Plan& plan) const {
  const int r = c_->world_rank();
  const std::size_t n = plan.bytes(s, r);
  if (on_host(s)) return Inbox::landed(s, out_.at(c_->local_of(s)) + plan.out_offset(s, r), n);
  return Inbox::landed(s, in_.at(c_->node_rank()) + plan.in_offset(s), n);
}

A2aExchange::Plan equal_blocks(std::size_t blk) {
  return {[blk](int, int) { return blk; }, [blk](int, int t) { return blk * t; },
          [blk](int s) { return blk * s; }};
}

A2aExchange::Plan BlockTable::plan(int W, int me,
                                   const std::function<std::size_t(int s, int t)>& bytes) {
  const auto w = static_cast<std::size_t>(W);
  W_ = W;
  bytes_.assign(w * w, 0);
  out_off_.assign(w * w, 0);
  in_off_.assign(w, 0);
  for (int s = 0; s < W; ++s) {
    std::size_t off = 0;
    for (int t = 0; t < W; ++t) {
      bytes_[s * w + t] = bytes(s, t);
      out_off_[s * w + t] = off;
      off += bytes_[s * w + t];
    }
  }
  std::size_t in_off = 0;
  for (int s = 0; s < W; ++s) {
    in_off_[s] = in_off;
    in_off += bytes_[s * w + me];
  }
  return {[this](int s, int t) { return bytes_[static_cast<std::size_t>(s * W_ + t)]; },
          [this](int s, int t) { return out_off_[static_cast<std::size_t>(s * W_ + t)]; },
          [this](int s) { return in_off_[s]; }};
}

}  // namespace fluxcpp::ops
