#include "ops/core/a2a_exchange.hpp"

namespace fluxcpp::ops {

namespace {
constexpr int kTag = 1;
}  // namespace

A2aExchange::A2aExchange(detail::ContextImpl& c, shm::Layout& layout, std::size_t out_bytes,
                         std::size_t in_bytes, bool needed)
    : c_(&c) {
  const int W = c.world_size();
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

void A2aExchange::begin(OpCore& core, const Plan& plan) {
  core_ = &core;
  const int W = c_->world_size(), r = c_->world_rank(), nid = c_->node_id();
  for (int p = 0; p < W; ++p) {
    send_bytes_[p] = plan.bytes(r, p);
    send_off_[p] = plan.out_offset(r, p);
    send_base_[p] = sent_[p].begin(send_bytes_[p]);
    recv_bytes_[p] = plan.bytes(p, r);
    recv_base_[p] = received_[p].begin(recv_bytes_[p]);
    // A host peer's block is read in its out slot; another host's lands in our in slot.
    recv_off_[p] = c_->node_of(p) == nid ? plan.out_offset(p, r) : plan.in_offset(p);
  }
  if (c_->num_nodes() == 1) return;
  const int me = c_->node_rank();
  std::vector<comm::Transport::Transfer> t;
  for (int i = 1; i < W; ++i) {  // ring order: receive from r-i, send to r+i
    const int s = (r + W - i) % W, d = (r + i) % W;
    if (c_->node_of(s) != nid)
      t.push_back({false, s, kTag, in_.at(me) + recv_off_[s], recv_bytes_[s], &in_landed_.at(me, s),
                   recv_base_[s]});
    if (c_->node_of(d) != nid)
      t.push_back({true, d, kTag, out_.at(me) + send_off_[d], send_bytes_[d], &out_ready_.at(me, d),
                   send_base_[d]});
  }
  core.transport()->post(std::move(t));
}

Outbox A2aExchange::to(int t) const {
  const int me = c_->node_rank();
  return Outbox(out_.count() > 0 ? out_.at(me) + send_off_[t] : nullptr, send_bytes_[t],
                &out_ready_.at(me, t), send_base_[t]);
}

Inbox A2aExchange::from(int s) const {
  const int q = c_->local_of(s);
  if (c_->node_of(s) == c_->node_id())
    return Inbox(core_, s, out_.at(q) + recv_off_[s], recv_bytes_[s],
                 &out_ready_.at(q, c_->world_rank()), recv_base_[s], &out_ready_, c_->world_rank(),
                 q);
  const int me = c_->node_rank();
  return Inbox(core_, s, in_.at(me) + recv_off_[s], recv_bytes_[s], &in_landed_.at(me, s),
               recv_base_[s], &in_landed_, s, me);
}

const char* A2aExchange::data_of(int s, const Plan& plan) const {
  const int r = c_->world_rank();
  if (c_->node_of(s) == c_->node_id()) return out_.at(c_->local_of(s)) + plan.out_offset(s, r);
  return in_.at(c_->node_rank()) + plan.in_offset(s);
}

}  // namespace fluxcpp::ops
