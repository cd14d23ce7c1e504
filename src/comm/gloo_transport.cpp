#include "comm/gloo_transport.hpp"

#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <condition_variable>

#include "comm/gloo_net.hpp"
#include "comm/parts.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {
using Clock = std::chrono::steady_clock;
// A sender job waits for its producer asleep on the futex: it must not take a core from the GEMM.
constexpr shm::WaitPolicy kSleep{std::chrono::nanoseconds(0), std::chrono::nanoseconds(0)};
}  // namespace

struct GlooTransport::Batch {
  struct Stream {
    Transfer t;
    std::size_t chunk = 0, chunks = 0;
    std::unique_ptr<GlooBuffer> buf;
    std::size_t posted = 0;  // sends: chunks posted (guarded by Batch::mu)
    std::size_t done = 0;    // chunks completed (guarded by Batch::mu)
  };
  std::vector<Stream> streams;
  std::mutex mu;
  std::condition_variable cv;  // a chunk posted or completed, a job ended, an abort
  std::atomic<std::size_t> pending{0};
  std::atomic<bool> failed{false};
  std::unique_ptr<Error> error;  // guarded by mu; set once
  std::atomic<bool> aborted{false};
  int jobs = 0;                  // waiter jobs still running (guarded by mu)

  void fail(Error e) {
    std::lock_guard<std::mutex> lk(mu);
    if (!error) error = std::make_unique<Error>(std::move(e));
    failed.store(true, std::memory_order_release);
    cv.notify_all();
  }
};

GlooTransport::GlooTransport(const Parts& ctx, std::shared_ptr<GlooNet> net, const char* op,
                             std::size_t chunk_bytes)
    : Transport(ctx, op, chunk_bytes),
      net_(std::move(net)),
      serial_(ctx.life().creating_serial()) {}

GlooTransport::~GlooTransport() {
  if (!idle()) abandon(Error(Errc::kInternal, op_ + ": transfers abandoned by destroy"));
}

bool GlooTransport::idle() const {
  return !batch_ || batch_->pending.load(std::memory_order_acquire) == 0;
}

bool GlooTransport::failed() const {
  return batch_ && batch_->failed.load(std::memory_order_acquire);
}

void GlooTransport::raise_if_failed() const {
  if (!failed()) return;
  std::lock_guard<std::mutex> lk(batch_->mu);
  if (batch_->error) throw *batch_->error;
}

void GlooTransport::post(std::vector<Transfer> transfers) {
  if (batch_ && batch_->error) throw *batch_->error;
  if (!idle()) raise(Errc::kInternal, "{}: transfers posted over a busy batch", op_);
  if (const std::string f = net_->failure(); !f.empty())
    raise(Errc::kInvalidUsage, "{}: the network channel failed earlier: {}", op_, f);
  auto b = std::make_shared<Batch>();
  std::size_t messages = 0;
  for (Transfer& t : transfers) {
    if (t.bytes == 0) continue;
    Batch::Stream s;
    s.t = t;
    s.chunk = t.chunk > 0 ? std::min(t.chunk, chunk_) : chunk_;
    s.chunks = (t.bytes + s.chunk - 1) / s.chunk;
    s.buf = net_->buffer(t.buf, t.bytes);
    messages += s.chunks;
    b->streams.push_back(std::move(s));
  }
  b->pending.store(messages, std::memory_order_release);
  batch_ = b;
  // Sends are posted by their jobs as their chunks become ready (nothing for progress() to do),
  // but the chunks already written go at once, from here: a job's wakeup is a round of the
  // scheduler (~50 us), the most of a small transfer.
  const Parts& c = *ctx_;
  try {
    for (Batch::Stream& s : b->streams) {  // receives first, all of them
      if (s.t.send) continue;
      const uint64_t slot = GlooNet::op_slot(serial_, GlooNet::kTransportSlot,
                                             static_cast<uint32_t>(s.t.tag));
      for (std::size_t k = 0; k < s.chunks; ++k) {
        const std::size_t off = k * s.chunk;
        net_->recv(*s.buf, s.t.peer, slot, off, std::min(s.chunk, s.t.bytes - off));
      }
    }
    for (Batch::Stream& s : b->streams) {
      if (!s.t.send) continue;
      const uint64_t slot = GlooNet::op_slot(serial_, GlooNet::kTransportSlot,
                                             static_cast<uint32_t>(s.t.tag));
      while (s.posted < s.chunks) {
        const std::size_t off = s.posted * s.chunk, len = std::min(s.chunk, s.t.bytes - off);
        if (s.t.signal != nullptr && shm::signal_load(*s.t.signal) < s.t.base + off + len) break;
        net_->send(*s.buf, s.t.peer, slot, off, len);
        ++s.posted;
      }
    }
  } catch (const Error& e) {
    b->fail(e);
    abandon(e);
    throw;
  }
  // One waiter job per transfer.
  for (std::size_t i = 0; i < b->streams.size(); ++i) {
    const std::string what = fmt::format(
        "{}: rank {} (host {}, local rank {})", op_, b->streams[i].t.peer,
        c.topo().host_of(b->streams[i].t.peer), c.topo().local_of(b->streams[i].t.peer));
    const uint64_t slot = GlooNet::op_slot(serial_, GlooNet::kTransportSlot,
                                           static_cast<uint32_t>(b->streams[i].t.tag));
    {
      std::lock_guard<std::mutex> lk(b->mu);
      ++b->jobs;  // counted before it can end; a run() that throws takes it back below
    }
    auto job = [b, i, net = net_.get(), what, slot, me = c.topo().world_rank()] {
      Batch::Stream& s = b->streams[i];
      try {
        // A send posts each chunk once its producer wrote it (asleep on the ready signal's
        // futex), all of them before it counts completions: chunks pipeline on the link.
        std::size_t first = 0;
        {
          std::lock_guard<std::mutex> lk(b->mu);
          first = s.posted;  // what post() sent itself
        }
        for (std::size_t k = first; s.t.send && k < s.chunks && !b->aborted.load(); ++k) {
          const std::size_t off = k * s.chunk, len = std::min(s.chunk, s.t.bytes - off);
          while (s.t.signal != nullptr && !b->aborted.load() &&
                 !shm::signal_wait(*s.t.signal, s.t.base + off + len,
                                   Clock::now() + std::chrono::milliseconds(20), kSleep, nullptr,
                                   &b->aborted)) {
          }
          if (b->aborted.load()) break;
          net->send(*s.buf, s.t.peer, slot, off, len);
          std::lock_guard<std::mutex> lk(b->mu);
          ++s.posted;
        }
        // Completions, in order (a pair completes a slot's messages in order); a receive
        // publishes each chunk as it lands.
        for (std::size_t k = 0; k < s.chunks && !b->aborted.load(); ++k) {
          const bool ok = s.t.send ? net->wait_send(*s.buf, Deadline::max(), what)
                                   : net->wait_recv(*s.buf, nullptr, Deadline::max(), what);
          if (!ok) break;  // aborted
          const std::size_t end = std::min(s.t.bytes, (k + 1) * s.chunk);
          if (!s.t.send && s.t.signal != nullptr) shm::signal_max(*s.t.signal, s.t.base + end);
          std::lock_guard<std::mutex> lk(b->mu);
          ++s.done;
          b->pending.fetch_sub(1, std::memory_order_acq_rel);
          b->cv.notify_all();
        }
      } catch (const Error& e) {
        b->fail(Error(Errc::kTimeout, fmt::format("{} is gone or unreachable over TCP, {} of {} "
                                                  "bytes {}: {} (this is rank {})",
                                                  what, std::min(s.t.bytes, s.done * s.chunk),
                                                  s.t.bytes, s.t.send ? "sent" : "received",
                                                  e.what(), me)));
      }
      std::lock_guard<std::mutex> lk(b->mu);
      --b->jobs;
      b->cv.notify_all();
    };
    try {
      net_->waiters().run(std::move(job));
    } catch (const std::exception& e) {  // no thread for it: the batch cannot complete
      {
        std::lock_guard<std::mutex> lk(b->mu);
        --b->jobs;
      }
      const Error why(Errc::kSystem, fmt::format("{}: cannot start a waiter thread: {}", op_,
                                                 e.what()));
      b->fail(why);
      abandon(why);
      throw why;
    }
  }
}

bool GlooTransport::progress() noexcept {
  return idle() || failed();  // gloo's I/O thread and the waiter jobs do everything
}

void GlooTransport::complete(Deadline deadline) {
  if (batch_) {
    Batch& b = *batch_;
    std::unique_lock<std::mutex> lk(b.mu);
    const bool done = b.cv.wait_until(lk, deadline, [&] {
      return b.pending.load() == 0 || b.failed.load();
    });
    lk.unlock();
    if (!done) batch_->fail(Error(Errc::kTimeout, missing()));
  }
  if (failed()) {
    Error why(Errc::kInternal, op_ + ": failed");
    {
      std::lock_guard<std::mutex> lk(batch_->mu);
      if (batch_->error) why = *batch_->error;
    }
    abandon(why);  // gives the channel's failure the transfer's own words
  }
  raise_if_failed();
}

void GlooTransport::abandon(const Error& why) noexcept {
  if (!batch_) return;
  std::shared_ptr<Batch> b = batch_;
  b->fail(why);
  {
    std::unique_lock<std::mutex> lk(b->mu);
    b->aborted.store(true);
    for (Batch::Stream& s : b->streams) {
      if (s.done == s.chunks) continue;
      if (s.t.send)
        s.buf->abortWaitSend();
      else
        s.buf->abortWaitRecv();
    }
    b->cv.notify_all();
    b->cv.wait(lk, [&] { return b->jobs == 0; });
  }
  if (b->pending.load() != 0) {
    // gloo cannot take back a posted transfer: its buffer stays, and so does the memory it
    // points at (poisoned); the pair's later messages would not match, so the channel fails.
    poisoned_ = true;
    (void)new std::shared_ptr<Batch>(b);
    net_->fail(fmt::format("{}: transfers abandoned in flight ({})", op_, why.what()));
    b->pending.store(0, std::memory_order_release);
  }
}

std::string GlooTransport::missing() const {
  std::lock_guard<std::mutex> lk(batch_->mu);
  for (const Batch::Stream& s : batch_->streams) {
    if (s.done == s.chunks) continue;
    return timeout_text("TCP", &s.t, std::min(s.t.bytes, s.done * s.chunk),
                        s.t.send && s.posted < s.chunks);
  }
  return timeout_text("TCP", nullptr, 0, false);
}

}  // namespace fluxcpp::comm
