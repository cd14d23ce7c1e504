#include "comm/gloo_net.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/gloo_auth.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds until(GlooNet::Deadline deadline) {
  if (deadline == GlooNet::Deadline::max()) return std::chrono::hours(24 * 365);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

double seconds_until(GlooNet::Deadline deadline) {
  if (deadline == GlooNet::Deadline::max()) return 1e9;
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

// gloo's rendezvous over the caller's store, under a prefix, every wait bounded by the create's
// deadline.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(const KvStore& s, std::string prefix, GlooNet::Deadline deadline)
      : s_(s), prefix_(std::move(prefix)), deadline_(deadline) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    const std::string v = s_.get(prefix_ + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, {}); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    for (const std::string& k : keys)
      if (!s_.wait(prefix_ + k, seconds_until(deadline_)))
        raise(Errc::kTimeout,
              "context create: the network rendezvous timed out waiting for key '{}' in the "
              "store (a rank on another host did not publish its address)",
              prefix_ + k);
  }

 private:
  const KvStore& s_;
  std::string prefix_;
  GlooNet::Deadline deadline_;
};

// The interface of the default route ("" if none): what reaches other machines.
std::string default_route_interface() {
  std::ifstream routes("/proc/net/route");
  std::string line;
  std::getline(routes, line);  // the header
  while (std::getline(routes, line)) {
    std::istringstream f(line);
    std::string iface, destination;
    if (f >> iface >> destination && destination == "00000000") return iface;
  }
  return {};
}

std::shared_ptr<gloo::transport::Device> make_device(bool several_machines,
                                                     const std::shared_ptr<const PairAuth>& auth) {
  gloo::transport::tcp::attr attr;
  const char* iface = std::getenv("FLUXCPP_SOCKET_IFNAME");
  if (iface == nullptr || *iface == '\0') iface = std::getenv("GLOO_SOCKET_IFNAME");
  if (iface != nullptr && *iface != '\0') {
    attr.iface = iface;
    try {
      return make_auth_device(attr, auth);
    } catch (const std::exception& e) {
      raise(Errc::kSystem, "context create: cannot listen on interface '{}' ({}): {}", iface,
            std::getenv("FLUXCPP_SOCKET_IFNAME") ? "FLUXCPP_SOCKET_IFNAME"
                                                 : "GLOO_SOCKET_IFNAME",
            e.what());
    }
  }
  // Ranks on several machines: the default route's interface (a host name often resolves to a
  // loopback address, 127.0.1.1 on Debian, which no other machine reaches).
  if (several_machines) {
    if (const std::string route = default_route_interface(); !route.empty()) {
      attr.iface = route;
      try {
        return make_auth_device(attr, auth);
      } catch (const std::exception&) {
        attr = gloo::transport::tcp::attr();
      }
    }
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0 && host[0] != '\0') {
    attr.hostname = host;
    try {
      return make_auth_device(attr, auth);
    } catch (const std::exception&) {
      // The name does not resolve to an address of this machine: the loopback below.
    }
  }
  attr = gloo::transport::tcp::attr("127.0.0.1");
  return make_auth_device(attr, auth);
}

// gloo's I/O thread polls its sockets level-triggered and skips a pair whose lock another thread
// holds: woken on the core of a thread that posts (and holds that lock), it would preempt it and
// spin until its time slice ends. As SCHED_BATCH it never preempts on wakeup: it runs when the
// core is free or at the next tick. gloo starts it in CreateDevice, and a new thread inherits its
// creator's policy: the calling thread takes SCHED_BATCH for that call only.
class BatchPolicyScope {
 public:
  BatchPolicyScope() {
    policy_ = sched_getscheduler(0);
    if (policy_ < 0 || sched_getparam(0, &param_) != 0) return;
    sched_param batch{};
    set_ = sched_setscheduler(0, SCHED_BATCH, &batch) == 0;
  }
  ~BatchPolicyScope() {
    if (set_) (void)sched_setscheduler(0, policy_, &param_);
  }

 private:
  int policy_ = -1;
  sched_param param_{};
  bool set_ = false;
};

}  // namespace

Waiters::~Waiters() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Waiters::run(std::function<void()> job) {
  std::lock_guard<std::mutex> lk(mu_);
  jobs_.push_back(std::move(job));
  if (idle_ >= static_cast<int>(jobs_.size())) {
    cv_.notify_one();
    return;
  }
  threads_.emplace_back([this] { loop(); });
}

void Waiters::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stop_
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    job();  // jobs catch their own errors
    job = nullptr;  // what it holds goes here, outside the lock
    lk.lock();
  }
}

GlooNet::GlooNet(const KvStore& store, const std::string& prefix, int rank, int size,
                 Deadline deadline, bool several_machines)
    : rank_(rank), size_(size) {
  // The job's secret, which every pair proves it holds (comm/gloo_auth.hpp).
  const std::shared_ptr<const PairAuth> auth = share_secret(store, prefix, rank, deadline);
  std::shared_ptr<gloo::transport::Device> dev;
  try {
    BatchPolicyScope batch;  // for gloo's I/O thread, started here
    dev = make_device(several_machines, auth);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    raise(Errc::kSystem, "context create: gloo cannot open a TCP device: {}", e.what());
  }
  address_ = dev->str();
  if (several_machines && (address_.find("127.") != std::string::npos ||
                           address_.find("::1") != std::string::npos))
    raise(Errc::kInvalidUsage,
          "context create: rank {} would listen on a loopback address ({}) while the ranks span "
          "several machines: set FLUXCPP_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME) to the interface "
          "that reaches them",
          rank, address_);
  auto c = std::make_shared<gloo::rendezvous::Context>(rank, size);
  c->setTimeout(until(deadline));
  StoreAdapter adapter(store, prefix, deadline);
  try {
    c->connectFullMesh(adapter, dev);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    raise(Errc::kTimeout,
          "context create: rank {} ({}) could not connect to every other rank over TCP by the "
          "deadline: {}",
          rank, address_, e.what());
  }
  c->setTimeout(std::chrono::hours(24 * 365));
  ctx_ = std::move(c);
}

GlooNet::~GlooNet() = default;

std::unique_ptr<GlooBuffer> GlooNet::buffer(void* ptr, std::size_t bytes) {
  return ctx_->createUnboundBuffer(ptr, bytes);
}

std::string GlooNet::failure() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

void GlooNet::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failure_.empty()) failure_ = why;
  }
  // Close every pair: what was posted to a live peer must never reach a buffer its owner freed
  // on the way out (gloo's reader would spin on it; a transfer may point into the caller's own
  // memory: Transport::takes_user_memory), and the peers learn at once. On every call, not the
  // first only: a caller must not return while another thread is still closing. A pair's close
  // takes the pair's lock, which its reader holds while it writes into a buffer, and a closed
  // pair's close does nothing; each pair is closed on its own, so that one that throws leaves no
  // other open.
  if (!ctx_) return;
  for (int i = 0; i < ctx_->size; ++i) {
    try {
      auto& pair = ctx_->getPair(i);
      if (pair) pair->close();
    } catch (const std::exception&) {
      // this pair is closing or never connected
    }
  }
}

void GlooNet::raise_gloo(const std::string& what, const std::string& gloo_error) {
  const std::string msg = fmt::format("{}: the TCP channel failed (this is rank {}): {}", what,
                                      rank_, gloo_error);
  fail(msg);
  raise(Errc::kSystem, "{}", msg);
}

template <class Wait>
bool GlooNet::bounded_wait(Deadline deadline, const std::string& what, Wait&& wait) {
  try {
    return wait(until(deadline));
  } catch (const std::exception& e) {
    if (Clock::now() + std::chrono::milliseconds(5) >= deadline) {
      fail(what + ": timed out");
      raise(Errc::kTimeout, "{}", what);
    }
    raise_gloo(what, e.what());
  }
}

bool GlooNet::wait_recv(GlooBuffer& b, int* peer, Deadline deadline, const std::string& what) {
  return bounded_wait(deadline, what, [&](auto timeout) { return b.waitRecv(peer, timeout); });
}

bool GlooNet::wait_send(GlooBuffer& b, Deadline deadline, const std::string& what) {
  return bounded_wait(deadline, what, [&](auto timeout) { return b.waitSend(nullptr, timeout); });
}

void GlooNet::send(GlooBuffer& b, int peer, uint64_t slot, std::size_t off, std::size_t bytes) {
  try {
    b.send(peer, slot, off, bytes);
  } catch (const std::exception& e) {
    raise_gloo(fmt::format("send to rank {}", peer), e.what());
  }
}

void GlooNet::recv(GlooBuffer& b, int peer, uint64_t slot, std::size_t off, std::size_t bytes) {
  try {
    b.recv(peer, slot, off, bytes);
  } catch (const std::exception& e) {
    raise_gloo(fmt::format("receive from rank {}", peer), e.what());
  }
}

}  // namespace fluxcpp::comm
