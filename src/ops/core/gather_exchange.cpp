#include "ops/core/gather_exchange.hpp"

#include <cstring>

namespace fluxcpp::ops {

GatherExchange::GatherExchange(const comm::Parts& c, const Links& links, shm::Layout& layout,
                               std::size_t max_block, bool needed)
    : c_(&c), links_(&links), needed_(needed) {
  const int N = links.hosts();
  staged_ = layout.slots("staged", needed ? 1 : 0, max_block);
  staged_ready_ = layout.signals("staged-ready", 1);
  rail_in_ = layout.slots("rail-in", N > 1 ? N : 0, max_block);
  rail_landed_ = layout.signals("rail-landed", N > 1 ? N : 0);
  others_ = links.host_ring();
  others_.insert(others_.end(), links.arrivals().begin(), links.arrivals().end());
}

void GatherExchange::begin(OpCore& core, std::size_t block, std::size_t chunk) {
  start(core, block, chunk, Direct());
}

void GatherExchange::begin(OpCore& core, std::size_t block, const Direct& direct) {
  start(core, block, 0, direct);
}

void GatherExchange::start(OpCore& core, std::size_t block, std::size_t chunk,
                           const Direct& direct) {
  core_ = &core;
  block_ = block;
  staged_base_ = staged_tally_.begin(block);
  rail_base_ = rail_tally_.begin(block);
  const Links& l = *links_;
  direct_ = Direct();
  if (!l.networked()) return;
  if (l.host_size() == 1 && core.transport()->takes_user_memory()) direct_ = direct;
  const int me = l.local();
  constexpr int kTag = static_cast<int>(WireTag::kGather);
  std::vector<comm::Transport::Transfer> t;
  for (int n : l.next_hosts()) {  // receive from the next hosts, send to the previous ones
    char* at = direct_.recv != nullptr ? direct_.recv + block * l.rail(n) : rail_in_.at(me, n);
    t.push_back({false, l.rail(n), kTag, at, block, &rail_landed_.at(me, n), rail_base_, chunk});
  }
  // A block sent from the caller's buffer is ready now: its signal says so (it keeps counting
  // the bytes of every call, staged or not).
  if (direct_.send != nullptr) shm::signal_set(staged_ready_.at(me), staged_base_ + block);
  char* from = direct_.send != nullptr ? const_cast<char*>(direct_.send) : staged_.at(me);
  for (int n : l.prev_hosts())
    t.push_back({true, l.rail(n), kTag, from, block, &staged_ready_.at(me), staged_base_, chunk});
  core.transport()->post(std::move(t));
}

Outbox GatherExchange::own() const {
  const int me = links_->local();
  return Outbox(core_, needed_ ? staged_.at(me) : nullptr, block_, &staged_ready_.at(me), staged_base_);
}

void GatherExchange::stage(const char* input, std::size_t block, bool zero_copy) const {
  if (!read_by_others()) return;
  const Outbox mine = own();
  if (zero_copy) return mine.publish_all();  // (the publish posts the sends now)
  // Between hosts in the transport's messages; within one, in the configured chunks.
  const std::size_t step = links_->networked()
                               ? core_->transport()->chunk_bytes()
                               : static_cast<std::size_t>(c_->runtime().config().chunk_bytes);
  mine.write(input, block, step);
}

bool GatherExchange::stage_for_hosts(const char* input, std::size_t block) const {
  if (!links_->networked() || direct_.send != nullptr) return false;
  own().write(input, block, core_->transport()->chunk_bytes());
  return true;
}

void GatherExchange::gather_host(char* out, const char* own, std::size_t block) const {
  std::memcpy(out + block * links_->rank(), own, block);
  for (int g : links_->host_ring()) from(g).drain(out + block * g, 0, block);
}

void GatherExchange::gather_payloads(const OpCore& core, char* out, const char* own,
                                     std::size_t block) const {
  for (int g = 0; g < links_->world(); ++g)
    std::memcpy(out + block * g, g == links_->rank() ? own : core.handshake().payload_of(g), block);
}

void GatherExchange::drain_other_hosts(char* out, std::size_t block) const {
  for (int g : links_->arrivals()) from(g).drain(out + block * g, 0, block);
}

void GatherExchange::copy_out(char* out, const char* own, std::size_t block,
                              const char* host_gathered) const {
  std::memcpy(out + block * links_->rank(), own, block);
  for (int g : links_->host_ring())
    std::memcpy(out + block * g, host_gathered != nullptr ? host_gathered + block * g : data_of(g),
                block);
  for (int g : links_->arrivals()) std::memcpy(out + block * g, data_of(g), block);
}

std::vector<Inbox> GatherExchange::host_inboxes() const {
  std::vector<Inbox> out;
  for (int g : links_->host_ring()) out.push_back(from(g));
  return out;
}

Inbox GatherExchange::from(int g) const {
  const Link& l = links_->link(g);
  if (l.shm())
    return Inbox(core_, g, staged_.at(l.local), block_, &staged_ready_.at(l.local), staged_base_,
                 &staged_ready_, 0, l.local);
  // Another host's block arrives at the host rank with its local rank (or in the caller's buffer).
  if (direct_.recv != nullptr)
    return Inbox(core_, g, direct_.recv + block_ * g, block_, &rail_landed_.at(l.local, l.host),
                 rail_base_, &rail_landed_, l.host, l.local);
  return Inbox(core_, g, rail_in_.at(l.local, l.host), block_, &rail_landed_.at(l.local, l.host),
               rail_base_, &rail_landed_, l.host, l.local);
}

bool GatherExchange::networked(int g) const {
  return links_->link(g).net();
}

const char* GatherExchange::data_of(int g) const {
  const Link& l = links_->link(g);
  return l.shm() ? staged_.at(l.local) : rail_in_.at(l.local, l.host);
}

}  // namespace fluxcpp::ops
