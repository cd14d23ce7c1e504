#include "ops/core/a2a_exchange.hpp"

#include <algorithm>

#include "ops/core/single_copy.hpp"

namespace fluxcpp::ops {

A2aExchange::A2aExchange(const Links& links, shm::Layout& layout, std::size_t out_bytes,
                         std::size_t in_bytes, bool needed)
    : links_(&links) {
  const int W = links.world();
  out_ = layout.slots("a2a-out", needed ? 1 : 0, out_bytes);
  in_ = layout.slots("a2a-in", links.networked() ? 1 : 0, in_bytes);
  out_ready_ = layout.signals("a2a-out-ready", W);
  in_landed_ = layout.signals("a2a-in-landed", links.networked() ? W : 0);
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
  if (pull.copy == nullptr || !pull.copy->usable()) return false;
  // Single copy when the host's blocks are large (every rank decides from the same plan).
  const std::vector<int>& host = links_->host_members();
  std::size_t largest = 0;
  for (int a : host)
    for (int b : host)
      if (a != b) largest = std::max(largest, plan.bytes(a, b));
  return pull.copy->worth(largest);
}

void A2aExchange::begin(OpCore& core, const Plan& plan) {
  begin(core, plan, Pull(), Direct());
}

void A2aExchange::begin(OpCore& core, const Plan& plan, const Pull& pull) {
  begin(core, plan, pull, Direct());
}

void A2aExchange::begin(OpCore& core, const Plan& plan, const Pull& pull, const Direct& direct) {
  core_ = &core;
  pull_ = single_copy(plan, pull) ? pull : Pull{};
  const Links& l = *links_;
  const bool user = l.networked() && core.transport()->takes_user_memory();
  direct_ = Direct{user ? direct.send : nullptr, user ? direct.recv : nullptr};
  const int W = l.world(), r = l.rank();
  for (int p = 0; p < W; ++p) {
    send_bytes_[p] = plan.bytes(r, p);
    send_off_[p] = plan.out_offset(r, p);
    send_base_[p] = sent_[p].begin(send_bytes_[p]);
    recv_bytes_[p] = plan.bytes(p, r);
    recv_base_[p] = received_[p].begin(recv_bytes_[p]);
    // A host peer's block is read in its out slot; another host's lands in our in slot.
    recv_off_[p] = l.link(p).shm() ? plan.out_offset(p, r) : plan.in_offset(p);
  }
  if (!l.networked()) return;
  const int me = l.local();
  constexpr int kTag = static_cast<int>(WireTag::kA2a);
  std::vector<comm::Transport::Transfer> t;
  for (int i = 0; i < W - 1; ++i) {  // ring order: receive from r-i, send to r+i
    const int s = l.down()[i], d = l.up()[i];
    if (l.link(s).net()) {
      char* at = direct_.recv != nullptr ? direct_.recv : in_.at(me);
      t.push_back({false, s, kTag, at + recv_off_[s], recv_bytes_[s], &in_landed_.at(me, s),
                   recv_base_[s]});
    }
    if (l.link(d).net()) {
      // A block sent from the caller's buffer is ready now: its signal says so (it keeps
      // counting the bytes of every call, staged or not).
      if (direct_.send != nullptr)
        shm::signal_set(out_ready_.at(me, d), send_base_[d] + send_bytes_[d]);
      char* from = direct_.send != nullptr ? const_cast<char*>(direct_.send) : out_.at(me);
      t.push_back({true, d, kTag, from + send_off_[d], send_bytes_[d], &out_ready_.at(me, d),
                   send_base_[d]});
    }
  }
  core.transport()->post(std::move(t));
}

Outbox A2aExchange::to(int t) const {
  if (pull_.copy != nullptr && links_->link(t).shm()) return Outbox();  // t reads our input itself
  if (direct_.send != nullptr && links_->link(t).net()) return Outbox();  // it leaves from there
  const int me = links_->local();
  return Outbox(core_, out_.count() > 0 ? out_.at(me) + send_off_[t] : nullptr, send_bytes_[t],
                &out_ready_.at(me, t), send_base_[t]);
}

Inbox A2aExchange::from(int s) const {
  const Link& l = links_->link(s);
  const int q = l.local, r = links_->rank();
  if (pull_.copy != nullptr && l.shm()) {
    const uint64_t input = pull_.input(q);
    if (input == 0) return Inbox::landed(s, out_.at(q) + recv_off_[s], recv_bytes_[s]);
    return Inbox::in_process(s, pull_.copy->pid(q), input + recv_off_[s], recv_bytes_[s]);
  }
  if (l.shm())
    return Inbox(core_, s, out_.at(q) + recv_off_[s], recv_bytes_[s], &out_ready_.at(q, r),
                 recv_base_[s], &out_ready_, r, q);
  const int me = links_->local();
  const char* at = direct_.recv != nullptr ? direct_.recv : in_.at(me);
  return Inbox(core_, s, at + recv_off_[s], recv_bytes_[s], &in_landed_.at(me, s), recv_base_[s],
               &in_landed_, s, me);
}

void A2aExchange::receive(const std::function<void(const Inbox&)>& take) const {
  if (pull_.copy != nullptr) pull_.copy->pull(*core_, [&](int, int g) { take(from(g)); });
  for (int s : links_->receive())
    if (pull_.copy == nullptr || links_->link(s).net()) take(from(s));
}

Inbox A2aExchange::held(int s, const Plan& plan) const {
  const int r = links_->rank();
  const std::size_t n = plan.bytes(s, r);
  const Link& l = links_->link(s);
  if (l.shm()) return Inbox::landed(s, out_.at(l.local) + plan.out_offset(s, r), n);
  return Inbox::landed(s, in_.at(links_->local()) + plan.in_offset(s), n);
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
