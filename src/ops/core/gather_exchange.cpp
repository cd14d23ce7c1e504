#include "ops/core/gather_exchange.hpp"

#include <algorithm>
#include <cstring>

namespace fluxcpp::ops {

namespace {
constexpr int kGatherTag = 2;
}  // namespace

GatherExchange::GatherExchange(detail::ContextImpl& c, shm::Layout& layout, std::size_t max_block,
                               bool needed)
    : c_(&c), needed_(needed) {
  const int N = c.num_nodes();
  staged_ = layout.slots("staged", needed ? 1 : 0, max_block);
  staged_ready_ = layout.signals("staged-ready", 1);
  rail_in_ = layout.slots("rail-in", N > 1 ? N : 0, max_block);
  rail_landed_ = layout.signals("rail-landed", N > 1 ? N : 0);
  const int L = c.node_size(), me = c.node_rank(), nid = c.node_id();
  for (int i = 1; i < L; ++i) host_peers_.push_back(c.world_rank_of(nid, (me + i) % L));
  for (int i = 1; i < N; ++i)
    for (int j = 0; j < L; ++j) remote_.push_back(c.world_rank_of((nid + i) % N, (me + j) % L));
  others_ = host_peers_;
  others_.insert(others_.end(), remote_.begin(), remote_.end());
  for (int q = 0; q < L; ++q) host_.push_back(c.world_rank_of(nid, q));
  std::vector<int> sorted = host_;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t a = 0; a < sorted.size();) {
    std::size_t b = a + 1;
    while (b < sorted.size() && sorted[b] == sorted[b - 1] + 1) ++b;
    host_runs_.emplace_back(sorted[a], static_cast<int64_t>(b - a));
    a = b;
  }
}

void GatherExchange::begin(OpCore& core, std::size_t block, std::size_t chunk) {
  core_ = &core;
  block_ = block;
  staged_base_ = staged_tally_.begin(block);
  rail_base_ = rail_tally_.begin(block);
  const int N = c_->num_nodes();
  if (N == 1) return;
  const int me = c_->node_rank(), nid = c_->node_id();
  std::vector<comm::Transport::Transfer> t;
  for (int i = 1; i < N; ++i) {  // receive from the next hosts, send to the previous ones
    const int n = (nid + i) % N;
    t.push_back({false, c_->world_rank_of(n, me), kGatherTag, rail_in_.at(me, n), block,
                 &rail_landed_.at(me, n), rail_base_, chunk});
  }
  for (int i = 1; i < N; ++i) {
    const int n = (nid + N - i) % N;
    t.push_back({true, c_->world_rank_of(n, me), kGatherTag, staged_.at(me), block, &staged_ready_.at(me),
                 staged_base_, chunk});
  }
  core.transport()->post(std::move(t));
}

Outbox GatherExchange::own() const {
  const int me = c_->node_rank();
  return Outbox(core_, needed_ ? staged_.at(me) : nullptr, block_, &staged_ready_.at(me), staged_base_);
}

void GatherExchange::stage(const char* input, std::size_t block, bool zero_copy) const {
  if (!read_by_others()) return;
  const Outbox mine = own();
  if (zero_copy) return mine.publish_all();  // (the publish posts the sends now)
  // Between hosts in the transport's messages; within one, in the configured chunks.
  const std::size_t step = !remote_.empty() ? core_->transport()->chunk_bytes()
                                            : static_cast<std::size_t>(c_->config().chunk_bytes);
  mine.write(input, block, step);
}

bool GatherExchange::stage_for_hosts(const char* input, std::size_t block) const {
  if (remote_.empty()) return false;
  own().write(input, block, core_->transport()->chunk_bytes());
  return true;
}

void GatherExchange::gather_host(char* out, const char* own, std::size_t block) const {
  std::memcpy(out + block * c_->world_rank(), own, block);
  for (int g : host_peers_) from(g).drain(out + block * g, 0, block);
}

void GatherExchange::gather_payloads(const OpCore& core, char* out, const char* own,
                                     std::size_t block) const {
  for (int g = 0; g < c_->world_size(); ++g)
    std::memcpy(out + block * g, g == c_->world_rank() ? own : core.handshake().payload_of(g),
                block);
}

void GatherExchange::drain_other_hosts(char* out, std::size_t block) const {
  for (int g : remote_) from(g).drain(out + block * g, 0, block);
}

void GatherExchange::copy_out(char* out, const char* own, std::size_t block,
                              const char* host_gathered) const {
  std::memcpy(out + block * c_->world_rank(), own, block);
  for (int g : host_peers_)
    std::memcpy(out + block * g, host_gathered != nullptr ? host_gathered + block * g : data_of(g),
                block);
  for (int g : remote_) std::memcpy(out + block * g, data_of(g), block);
}

std::vector<Inbox> GatherExchange::host_inboxes() const {
  std::vector<Inbox> out;
  for (int g : host_peers_) out.push_back(from(g));
  return out;
}

Inbox GatherExchange::from(int g) const {
  const int q = c_->local_of(g), n = c_->node_of(g);
  if (n == c_->node_id())
    return Inbox(core_, g, staged_.at(q), block_, &staged_ready_.at(q), staged_base_,
                 &staged_ready_, 0, q);
  // Another host's block arrives at the host rank with its local rank.
  return Inbox(core_, g, rail_in_.at(q, n), block_, &rail_landed_.at(q, n), rail_base_,
               &rail_landed_, n, q);
}

bool GatherExchange::networked(int g) const { return c_->node_of(g) != c_->node_id(); }

const char* GatherExchange::data_of(int g) const {
  const int q = c_->local_of(g), n = c_->node_of(g);
  return n == c_->node_id() ? staged_.at(q) : rail_in_.at(q, n);
}

}  // namespace fluxcpp::ops
