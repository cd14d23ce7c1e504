// AsyncSendRecv: the collective create (peer lists, slot layout, transport) and destroy.
#include "ops/async_send_recv.hpp"

#include <algorithm>
#include <cstring>

#include "comm/deadline_scope.hpp"
#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/options.hpp"
#include "ops/core/pair_plan.hpp"

namespace fluxcpp::detail {

namespace {
constexpr uint64_t kDestroyBit = uint64_t{1} << 62;  // destroy check-in token: serial | bit
}  // namespace

AsyncSendRecvImpl::AsyncSendRecvImpl(const std::shared_ptr<ContextImpl>& ctx,
                                     const AsyncSendRecvOptions& o, const std::string& local_error)
    : ctx_(comm::parts_of(ctx)), opts_(o) {
  ops::create_op(*ctx_, kOp, [&] { create(local_error); });
}

AsyncSendRecvImpl::~AsyncSendRecvImpl() {
  if (!ctx_->life().in_creator()) return;  // a copy made by fork(): no stream runs its copies here
  // Copies queued on comm streams read the caller's data and write our slots: let them finish
  // (they never wait for a peer).
  wait_copies(SteadyTime::max());
}

void AsyncSendRecvImpl::create(const std::string& local_error) {
  const comm::Parts& c = *ctx_;
  comm::Group& comm = c.control();
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  const AsyncSendRecvOptions& o = opts_;
  serial_ = c.life().creating_serial();
  std::vector<int> list = o.peers ? *o.peers : ops::Links::ring_neighbours(r, W);
  row_ = ops::agree_row_options(
      c, kOp, local_error, o.dtype, "n", o.n, "max_m", o.max_m,
      {{"num_slots", o.num_slots, ops::Field::Kind::kRange, 1, 4096}}, [&] {
        std::vector<int> seen;
        for (int p : list) {
          FLUXCPP_CHECK_ARG(p >= 0 && p < W, "{}: peers lists rank {}, outside [0, {}) (rank {})",
                            kOp, p, W, r);
          FLUXCPP_CHECK_ARG(p != r, "{}: peers lists this rank itself ({})", kOp, r);
          FLUXCPP_CHECK_ARG(std::find(seen.begin(), seen.end(), p) == seen.end(),
                            "{}: peers lists rank {} twice (rank {})", kOp, p, r);
          seen.push_back(p);
        }
      });
  slot_bytes_ = static_cast<std::size_t>(o.max_m) * row_;
  slots_ = o.num_slots;
  // Every rank's list, padded with -1: the symmetry check and the slot positions need them all.
  const int width = static_cast<int>(comm::max_value(comm, static_cast<long long>(list.size())));
  std::vector<int> all(static_cast<std::size_t>(width) * W, -1);
  if (width > 0) {
    std::vector<int> mine(width, -1);
    std::copy(list.begin(), list.end(), mine.begin());
    comm.allgather(mine.data(), all.data(), sizeof(int) * width);
  }
  const ops::PairPlan plan(ops::Links::of(c), all, width);
  comm::agree(comm, [&] {
    auto lists = [&](int a, int b) {
      for (int k = 0; k < width; ++k)
        if (all[static_cast<std::size_t>(a) * width + k] == b) return true;
      return false;
    };
    for (int a = 0; a < W; ++a)
      for (int k = 0; k < width; ++k) {
        const int b = all[static_cast<std::size_t>(a) * width + k];
        if (b < 0) continue;
        FLUXCPP_CHECK_ARG(lists(b, a),
                          "{}: peer lists are not symmetric: rank {} lists rank {}, but rank {} "
                          "does not list rank {}",
                          kOp, a, b, b, a);
      }
    FLUXCPP_CHECK_ARG(!plan.crosses_hosts() || slot_bytes_ <= static_cast<std::size_t>(INT32_MAX),
                      "{}: max_m={} x n={} is {} bytes, above the 2 GiB a message between hosts "
                      "may have",
                      kOp, o.max_m, o.n, slot_bytes_);
  });
  peers_ = list;
  make_pairs(plan);
}

// A pair per listed peer, routed by the plan; the slots for the host peers, the transport for
// the others.
void AsyncSendRecvImpl::make_pairs(const ops::PairPlan& plan) {
  const comm::Parts& c = *ctx_;
  const int streams = c.runtime().num_comm_streams();
  for (const ops::PairRoute& route : plan.routes()) {
    auto p = std::make_unique<Pair>();
    p->rank = route.rank;
    p->local = route.local;
    p->mine = route.mine;
    p->theirs = route.theirs;
    p->net = route.net;
    const std::size_t k = pairs_.size();
    p->stream = streams > 0 ? static_cast<int>(k % static_cast<std::size_t>(streams)) : -1;
    pairs_.push_back(std::move(p));
  }
  self_ = plan.self();
  const int host_slots = plan.host_slots();
  if (host_slots > 0) {
    const int n = host_slots * slots_;
    out_ = layout_.slots("out", n, slot_bytes_);
    rows_ = layout_.signals("rows", n);
    arrived_ = layout_.signals("arrived", host_slots);
    released_ = layout_.signals("released", host_slots);
  }
  // Agreed world-wide: a host whose /dev/shm is full must not leave the other hosts waiting.
  comm::agree(c.control(), [&] {
    if (host_slots == 0) return;
    buf_ = shm::SymmetricBuffer(c.host(), layout_.bytes(), c.life().creating_tag());
    layout_.bind(buf_);
  });
  if (plan.networked()) net_ = comm::make_p2p_net(c, kOp, slot_bytes_, slots_, plan.net_peers());
}

void AsyncSendRecvImpl::wait_copies(SteadyTime deadline) noexcept {
  for (auto& p : pairs_) {
    if (p->stream < 0 || p->ticket == 0) continue;
    try {
      ctx_->runtime().comm_stream(p->stream).wait(p->ticket, deadline);
    } catch (...) {
      // deliver() does not throw; another op's task error belongs to that op
    }
  }
}

void AsyncSendRecvImpl::close() {
  if (closed_) return;
  const comm::Parts& c = *ctx_;
  if (!c.life().in_creator()) {  // a copy made by fork(): local, nothing shared touched
    closed_ = true;
    return;
  }
  ops::ContextEntry entry(c, kOp);
  closed_ = true;  // whatever happens below, the op is gone
  const SteadyTime deadline = c.runtime().deadline();
  wait_copies(deadline);
  if (c.life().closed() || !c.life().broken().empty()) return;  // local
  comm::DeadlineScope scope(deadline, fmt::format("{} destroy", kOp));
  try {
    c.control().check_in(serial_ | kDestroyBit, "the destroy check-in");
  } catch (const std::exception& e) {
    // The context's communicator may hold an unmatched check-in.
    c.life().mark_broken(fmt::format("{} destroy failed: {}", kOp, e.what()));
    throw;
  }
  if (!net_ || net_->size() == 0) return;
  std::vector<uint64_t> received(net_->size(), 0);
  std::vector<bool> skip(net_->size(), false);
  for (auto& p : pairs_) {
    if (p->net < 0) continue;
    received[p->net] = p->received;
    skip[p->net] = !p->recv_broken.empty();
  }
  net_->drain(received, skip, deadline, kOp);
}

}  // namespace fluxcpp::detail
