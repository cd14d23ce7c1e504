#include "comm/gloo_p2p_net.hpp"

#include <gloo/transport/unbound_buffer.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/bounded.hpp"
#include "comm/gloo_net.hpp"
#include "comm/parts.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {
constexpr int kHeadSlot = 4, kDataSlot = 5, kCountSlot = 6;  // GlooNet::op_slot kinds
using Clock = std::chrono::steady_clock;
}  // namespace

struct GlooP2pNet::Pair {
  int rank = -1;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  int jobs = 0;
  // Sender (guarded by mu, but for the buffers and staging, which the slot protocol guards).
  std::vector<char> staging;  // num_slots * slot_bytes
  std::vector<uint64_t> heads;  // per slot: the message's size, sent as its header
  std::vector<std::unique_ptr<GlooBuffer>> head_buf, data_buf;  // per slot
  uint64_t ready = 0, posted = 0, completed = 0;
  std::string error;
  // Receiver. The header lands in heap memory of its own: the last header receive is never
  // taken back, and outlives the pair.
  std::unique_ptr<uint64_t> head_in = std::make_unique<uint64_t>(0);
  std::unique_ptr<GlooBuffer> head_in_buf;
  std::vector<char> inbox;
  std::unique_ptr<GlooBuffer> inbox_buf;
  bool has_head = false;  // the next message's size arrived (head_bytes); not yet taken
  std::size_t head_bytes = 0;
  bool receiving = false, landed = false;
  std::string recv_error;
};

GlooP2pNet::GlooP2pNet(const Parts& c, std::shared_ptr<GlooNet> net, const char* op,
                       std::size_t slot_bytes, int num_slots, const std::vector<int>& peers)
    : net_(std::move(net)),
      op_(op),
      serial_(c.life().creating_serial()),
      me_(c.topo().world_rank()),
      slot_(slot_bytes),
      slots_(num_slots) {
  agree(c.control(), [&] {
    for (int peer : peers) {
      auto p = std::make_shared<Pair>();
      p->rank = peer;
      resize_or_raise(p->staging, slot_bytes * static_cast<std::size_t>(num_slots), op,
                      "the staging slots of a peer on another host");
      resize_or_raise(p->inbox, slot_bytes, op, "the inbox of a peer on another host");
      p->heads.assign(static_cast<std::size_t>(num_slots), 0);
      for (int s = 0; s < num_slots; ++s) {
        p->head_buf.push_back(net_->buffer(&p->heads[s], sizeof(uint64_t)));
        p->data_buf.push_back(
            net_->buffer(p->staging.data() + slot_bytes * static_cast<std::size_t>(s), slot_bytes));
      }
      p->head_in_buf = net_->buffer(p->head_in.get(), sizeof(uint64_t));
      p->inbox_buf = net_->buffer(p->inbox.data(), slot_bytes);
      pairs_.push_back(std::move(p));
    }
  });
  try {
    for (const auto& p : pairs_) start_jobs(p);
  } catch (...) {
    stop();  // the pairs whose jobs started
    throw;
  }
}

void GlooP2pNet::start_jobs(const std::shared_ptr<Pair>& p) {
  const std::string what = fmt::format("{}: rank {}", op_, p->rank);
  const uint64_t head_slot = GlooNet::op_slot(serial_, kHeadSlot, 0);
  // The header receive is posted before the jobs start: the first message can land at once.
  net_->recv(*p->head_in_buf, p->rank, head_slot, 0, sizeof(uint64_t));
  auto gone = [what, me = me_](const Error& e) {
    return fmt::format("{} is gone: {} (this is rank {})", what, e.what(), me);
  };
  // A job is counted before it can end; a run() that throws takes it back. A job that fails
  // leaves its error in `error` (the first one); either way it is uncounted when it ends.
  auto start = [&](std::string Pair::*error, std::function<void()> body) {
    {
      std::lock_guard<std::mutex> lk(p->mu);
      ++p->jobs;
    }
    auto job = [p, error, gone, body = std::move(body)] {
      try {
        body();
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lk(p->mu);
        if (((*p).*error).empty()) (*p).*error = gone(e);
      }
      std::lock_guard<std::mutex> lk(p->mu);
      --p->jobs;
      p->cv.notify_all();
    };
    try {
      net_->waiters().run(std::move(job));
    } catch (...) {
      std::lock_guard<std::mutex> lk(p->mu);
      --p->jobs;
      throw;
    }
  };
  // Sends: counts them complete in order.
  start(&Pair::error, [p, net = net_.get(), what, slots = slots_] {
    for (;;) {
      std::unique_lock<std::mutex> lk(p->mu);
      p->cv.wait(lk, [&] { return p->stop || p->completed < p->posted; });
      if (p->stop) break;
      const std::size_t s = p->completed % static_cast<uint64_t>(slots);
      const bool data = p->heads[s] > 0;
      lk.unlock();
      if (!net->wait_send(*p->head_buf[s], Deadline::max(), what)) break;
      if (data && !net->wait_send(*p->data_buf[s], Deadline::max(), what)) break;
      lk.lock();
      ++p->completed;
      p->cv.notify_all();
    }
  });
  // Receives: a header, the next header's receive, then the message once the op took it.
  start(&Pair::recv_error, [p, net = net_.get(), what, head_slot] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(p->mu);
        if (p->stop) break;
      }
      if (!net->wait_recv(*p->head_in_buf, nullptr, Deadline::max(), what)) break;
      const std::size_t bytes = static_cast<std::size_t>(*p->head_in);
      net->recv(*p->head_in_buf, p->rank, head_slot, 0, sizeof(uint64_t));
      std::unique_lock<std::mutex> lk(p->mu);
      p->has_head = true;
      p->head_bytes = bytes;
      p->cv.notify_all();
      p->cv.wait(lk, [&] { return p->stop || p->receiving; });
      if (p->stop) break;
      lk.unlock();
      if (bytes > 0 && !net->wait_recv(*p->inbox_buf, nullptr, Deadline::max(), what)) break;
      lk.lock();
      p->landed = true;
      p->cv.notify_all();
      p->cv.wait(lk, [&] { return p->stop || !p->receiving; });
      if (p->stop) break;
    }
  });
}

GlooP2pNet::~GlooP2pNet() {
  stop();
}

void GlooP2pNet::stop() noexcept {
  for (const auto& p : pairs_) {
    if (!p->head_in_buf) continue;  // stopped already
    std::unique_lock<std::mutex> lk(p->mu);
    p->stop = true;
    p->head_in_buf->abortWaitRecv();
    p->inbox_buf->abortWaitRecv();
    for (auto& b : p->head_buf) b->abortWaitSend();
    for (auto& b : p->data_buf) b->abortWaitSend();
    p->cv.notify_all();
    p->cv.wait(lk, [&] { return p->jobs == 0; });
    const bool drained = p->completed == p->posted && !p->receiving && p->error.empty();
    if (!drained) {
      (void)new std::shared_ptr<Pair>(p);  // gloo may still touch any of it
      continue;
    }
    // Only the last header receive is still posted: its buffer and 8 bytes stay.
    (void)p->head_in_buf.release();
    (void)p->head_in.release();
  }
}

int GlooP2pNet::find(int peer) const {
  for (int i = 0; i < size(); ++i)
    if (pairs_[i]->rank == peer) return i;
  return -1;
}

bool GlooP2pNet::busy() const {
  for (const auto& p : pairs_) {
    std::lock_guard<std::mutex> lk(p->mu);
    if (p->posted > p->completed || p->receiving) return true;
  }
  return false;
}

uint64_t GlooP2pNet::completed(int i) {
  Pair& p = *pairs_[i];
  std::lock_guard<std::mutex> lk(p.mu);
  return p.completed;
}

std::string GlooP2pNet::send_error(int i) {
  Pair& p = *pairs_[i];
  std::lock_guard<std::mutex> lk(p.mu);
  return p.error;
}

char* GlooP2pNet::staging(int i, uint64_t q) {
  return pairs_[i]->staging.data() + ((q - 1) % static_cast<uint64_t>(slots_)) * slot_;
}

void GlooP2pNet::ready(int i, uint64_t q, std::size_t bytes) noexcept {
  Pair& p = *pairs_[i];
  std::lock_guard<std::mutex> lk(p.mu);
  p.heads[(q - 1) % static_cast<uint64_t>(slots_)] = bytes;
  p.ready = q;
  const uint64_t head_slot = GlooNet::op_slot(serial_, kHeadSlot, 0);
  const uint64_t data_slot = GlooNet::op_slot(serial_, kDataSlot, 0);
  try {
    while (p.error.empty() && p.posted < p.ready) {
      const std::size_t s = p.posted % static_cast<uint64_t>(slots_);
      net_->send(*p.head_buf[s], p.rank, head_slot, 0, sizeof(uint64_t));
      if (p.heads[s] > 0) net_->send(*p.data_buf[s], p.rank, data_slot, 0, p.heads[s]);
      ++p.posted;
    }
  } catch (const Error& e) {
    p.error = fmt::format("{}: rank {} is gone: {} (this is rank {})", op_, p.rank, e.what(), me_);
  }
  p.cv.notify_all();
}

bool GlooP2pNet::probe(int i, std::size_t* bytes) {
  Pair& p = *pairs_[i];
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.has_head && !p.receiving) {
    *bytes = p.head_bytes;
    return true;
  }
  if (!p.recv_error.empty()) raise(Errc::kTimeout, "{}", p.recv_error);
  return false;
}

void GlooP2pNet::start_recv(int i, std::size_t bytes) {
  Pair& p = *pairs_[i];
  std::lock_guard<std::mutex> lk(p.mu);
  if (!p.has_head || p.receiving || bytes != p.head_bytes)
    raise(Errc::kInternal, "{}: start_recv of {} bytes from rank {} without its header", op_,
          bytes, p.rank);
  if (bytes > 0)
    net_->recv(*p.inbox_buf, p.rank, GlooNet::op_slot(serial_, kDataSlot, 0), 0, bytes);
  p.receiving = true;
  p.cv.notify_all();
}

bool GlooP2pNet::recv_done(int i) {
  Pair& p = *pairs_[i];
  std::lock_guard<std::mutex> lk(p.mu);
  if (!p.receiving) return true;
  if (!p.landed) {
    if (!p.recv_error.empty()) raise(Errc::kTimeout, "{}", p.recv_error);
    return false;
  }
  p.receiving = p.landed = p.has_head = false;
  p.cv.notify_all();
  return true;
}

const char* GlooP2pNet::inbox(int i) const {
  return pairs_[i]->inbox.data();
}

void GlooP2pNet::drain(const std::vector<uint64_t>& received, const std::vector<bool>& skip,
                       Deadline deadline, const char* op) {
  const int P = size();
  if (P == 0) return;
  // The counts: what each end posted. Heap-held, left behind if the swap fails (gloo may still
  // write them).
  struct Swap {
    std::vector<uint64_t> mine, theirs;
  };
  auto swap = std::make_unique<Swap>();
  swap->mine.assign(P, 0);
  swap->theirs.assign(P, 0);
  std::vector<std::unique_ptr<GlooBuffer>> tx, rx;
  const uint64_t slot = GlooNet::op_slot(serial_, kCountSlot, 0);
  const std::string what = fmt::format("{} destroy: the teardown", op);
  try {
    for (int i = 0; i < P; ++i) {
      Pair& p = *pairs_[i];
      {
        std::lock_guard<std::mutex> lk(p.mu);
        swap->mine[i] = p.posted;
      }
      rx.push_back(net_->buffer(&swap->theirs[i], sizeof(uint64_t)));
      tx.push_back(net_->buffer(&swap->mine[i], sizeof(uint64_t)));
      net_->recv(*rx[i], p.rank, slot, 0, sizeof(uint64_t));
      net_->send(*tx[i], p.rank, slot, 0, sizeof(uint64_t));
    }
    for (int i = 0; i < P; ++i) {
      net_->wait_recv(*rx[i], nullptr, deadline, what);
      net_->wait_send(*tx[i], deadline, what);
    }
  } catch (const Error&) {
    (void)swap.release();
    for (auto& b : rx) (void)b.release();
    for (auto& b : tx) (void)b.release();
    throw;
  }
  // The messages this rank never took are taken and dropped; its own sends complete.
  std::vector<uint64_t> discarded(P, 0);
  for (;;) {
    int left = 0, late = -1;
    for (int i = 0; i < P; ++i) {
      Pair& p = *pairs_[i];
      if (!skip[i] && received[i] + discarded[i] < swap->theirs[i]) {
        bool receiving = false;
        {
          std::lock_guard<std::mutex> lk(p.mu);
          receiving = p.receiving;
        }
        std::size_t bytes = 0;
        if (!receiving && probe(i, &bytes)) {
          start_recv(i, bytes);
          receiving = true;
        }
        if (receiving && recv_done(i)) ++discarded[i];
      }
      std::lock_guard<std::mutex> lk(p.mu);
      const bool drained = skip[i] || received[i] + discarded[i] >= swap->theirs[i];
      if (!(drained && p.completed == p.posted && p.error.empty())) {
        ++left;
        if (late < 0) late = i;
      }
    }
    if (left == 0) return;
    if (Clock::now() >= deadline) {
      const int i = late;
      Pair& p = *pairs_[i];
      std::lock_guard<std::mutex> lk(p.mu);
      raise(Errc::kTimeout,
            "{} destroy: the teardown with rank {} did not finish within the timeout (this rank "
            "posted {} messages to it, {} completed; it posted {}, this rank took {}{})",
            op, p.rank, p.posted, p.completed, swap->theirs[i], received[i] + discarded[i],
            p.error.empty() ? "" : "; " + p.error);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace fluxcpp::comm
