#include "comm/gloo_auth.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>

#include "error_util.hpp"
#include "fault.hpp"

namespace fluxcpp::comm {

namespace {

namespace tcp = gloo::transport::tcp;
using Clock = std::chrono::steady_clock;
using Mac = std::array<unsigned char, 32>;

constexpr char kMagic[8] = {'f', 'l', 'u', 'x', 'a', 'u', 't', 'h'};
constexpr uint32_t kVersion = 1;

// The first message each side sends: who it is, whom it expects, and its challenge.
struct Hello {
  char magic[8];
  uint32_t version;
  uint32_t sender;
  uint32_t receiver;
  uint32_t reserved;
  unsigned char challenge[32];
};
static_assert(sizeof(Hello) == 56, "Hello travels as is");

// HMAC-SHA256 under the job's secret of (the job, sender, receiver, the receiver's challenge,
// the sender's challenge): what only a rank of this job can send as `sender` on this connection.
Mac proof(const PairAuth& a, uint32_t sender, uint32_t receiver, const unsigned char* to_challenge,
          const unsigned char* from_challenge) {
  std::vector<unsigned char> msg;
  const std::string label = "fluxcpp tcp pair v1";
  msg.insert(msg.end(), label.begin(), label.end());
  msg.push_back(0);
  msg.insert(msg.end(), a.job.begin(), a.job.end());
  msg.push_back(0);
  for (uint32_t v : {sender, receiver})
    for (int b = 0; b < 4; ++b) msg.push_back(static_cast<unsigned char>(v >> (8 * b)));
  msg.insert(msg.end(), to_challenge, to_challenge + 32);
  msg.insert(msg.end(), from_challenge, from_challenge + 32);
  Mac out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), a.key.data(), static_cast<int>(a.key.size()), msg.data(), msg.size(),
           out.data(), &len) == nullptr ||
      len != out.size())
    raise(Errc::kSystem, "context create: OpenSSL could not compute an HMAC-SHA256");
  return out;
}

std::string peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "an unknown address";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  }
  return fmt::format("{}:{}", host, port);
}

// Why an I/O step of the handshake ended early ("" when it completed).
std::string wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return "nothing by the create's deadline";
    pollfd p{fd, events, 0};
    const int rv = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rv < 0 && errno != EINTR) return fmt::format("poll failed: {}", std::strerror(errno));
    if (rv > 0) return "";
  }
}

std::string write_all(int fd, const void* data, std::size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (std::string why = wait_fd(fd, POLLOUT, deadline); !why.empty()) return why;
    } else {
      return fmt::format("the connection failed ({})", std::strerror(errno));
    }
  }
  return "";
}

// Reads exactly n bytes: never more, so that gloo's first message stays in the socket.
std::string read_exact(int fd, void* data, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
    } else if (r == 0) {
      return "closed the connection";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (std::string why = wait_fd(fd, POLLIN, deadline); !why.empty()) return "sent " + why;
    } else {
      return fmt::format("the connection failed ({})", std::strerror(errno));
    }
  }
  return "";
}

class AuthPair : public tcp::Pair {
 public:
  AuthPair(tcp::Context* context, tcp::Device* device, int peer, std::chrono::milliseconds timeout,
           std::shared_ptr<const PairAuth> auth)
      : tcp::Pair(context, device, peer, timeout), auth_(std::move(auth)) {}

  void connect(const std::vector<char>& bytes) override {
    // The failure tests hold a rank here, so that a stranger can be the first to connect.
    fault_point("tcp_connect", auth_->rank);
    try {
      tcp::Pair::connect(bytes);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      raise(Errc::kSystem, "context create: rank {} could not connect to rank {} over TCP: {}",
            auth_->rank, rank_, e.what());
    }
    authenticate();
  }

  // gloo's I/O thread. Until the handshake is over, the bytes of a connected pair are
  // authenticate()'s; whatever gloo throws here closes this pair with the error.
  void handleEvents(int events) override {
    if (!failure_.empty() || !authenticated_.load(std::memory_order_acquire)) {
      // try_lock, as gloo's own handler: a thread that holds the pair may wait on this thread.
      std::unique_lock<std::mutex> lk(m_, std::try_to_lock);
      if (!lk) return;
      if (!failure_.empty()) {
        close_locked(failure_);
        return;
      }
      if (state_ == CONNECTED) return;
    }
    try {
      tcp::Pair::handleEvents(events);
    } catch (const std::exception& e) {
      std::unique_lock<std::mutex> lk(m_, std::try_to_lock);
      const std::string why = fmt::format("the connection with rank {} failed: {}", rank_, e.what());
      if (lk)
        close_locked(why);
      else
        failure_ = why;  // closed on a later call (the socket stays ready)
    }
  }

 private:
  void close_locked(const std::string& why) {
    if (ex_ == nullptr && state_ != CLOSED) {
      try {
        signalException(why);
      } catch (const std::exception&) {
        // already failing
      }
    }
  }

  void authenticate() {
    const PairAuth& a = *auth_;
    int fd = -1;
    {
      std::lock_guard<std::mutex> lk(m_);
      fd = fd_;
    }
    const std::string from = peer_of(fd);
    bool taken = false;  // the socket taken from gloo's thread (given back below, either way)
    std::string why;
    try {
      why = handshake(fd, taken);
    } catch (const std::exception& e) {  // no random bytes, no HMAC: the socket still goes back
      why = e.what();
    }
    if (why.empty()) {
      authenticated_.store(true, std::memory_order_release);  // first: gloo's thread reads next
      device_->registerDescriptor(fd, EPOLLIN, this);
      return;
    }
    const std::string msg = fmt::format(
        "context create: a connection from {} on the channel to rank {} did not prove it is rank "
        "{} of this job ({}): a process that is not part of the job connected, or rank {} "
        "belongs to another job (this is rank {})",
        from, rank_, rank_, why, rank_, a.rank);
    {
      std::lock_guard<std::mutex> lk(m_);
      // Closing unregisters the socket from gloo's loop, which must then hold it (gloo's
      // changeState is noexcept: a failed unregister would end the process).
      if (taken) device_->registerDescriptor(fd, EPOLLIN, this);
      close_locked(msg);
    }
    raise(Errc::kSystem, "{}", msg);
  }

  // The challenge-response; "" when the peer proved it is rank_ of this job.
  std::string handshake(int fd, bool& taken) {
    const PairAuth& a = *auth_;
    try {
      device_->unregisterDescriptor(fd, this);  // the handshake reads here, not gloo's thread
      taken = true;
    } catch (const std::exception& e) {
      return fmt::format("the connection was already closed: {}", e.what());
    }
    Hello mine{};
    std::memcpy(mine.magic, kMagic, sizeof kMagic);
    mine.version = kVersion;
    mine.sender = static_cast<uint32_t>(a.rank);
    mine.receiver = static_cast<uint32_t>(rank_);
    const std::array<unsigned char, 32> challenge = random_secret();
    std::memcpy(mine.challenge, challenge.data(), challenge.size());
    if (std::string w = write_all(fd, &mine, sizeof mine, a.deadline); !w.empty())
      return "sending the challenge: " + w;
    Hello theirs{};
    // The magic first: junk is told at once, not after the bytes a hello would have.
    if (std::string w = read_exact(fd, theirs.magic, sizeof kMagic, a.deadline); !w.empty())
      return "it " + w;
    if (std::memcmp(theirs.magic, kMagic, sizeof kMagic) != 0)
      return "it sent bytes that are not fluxcpp's TCP handshake";
    if (std::string w = read_exact(fd, reinterpret_cast<char*>(&theirs) + sizeof kMagic,
                                   sizeof theirs - sizeof kMagic, a.deadline);
        !w.empty())
      return "it " + w;
    if (theirs.version != kVersion)
      return fmt::format("it speaks version {} of fluxcpp's TCP handshake, this rank {}",
                         theirs.version, kVersion);
    if (theirs.sender == static_cast<uint32_t>(a.rank) &&
        std::memcmp(theirs.challenge, mine.challenge, sizeof mine.challenge) == 0)
      return "it sent this rank's own message back";
    if (theirs.sender != static_cast<uint32_t>(rank_) ||
        theirs.receiver != static_cast<uint32_t>(a.rank))
      return fmt::format("it says it is rank {} calling rank {}", theirs.sender, theirs.receiver);
    const Mac answer =
        proof(a, static_cast<uint32_t>(a.rank), static_cast<uint32_t>(rank_), theirs.challenge,
              mine.challenge);
    if (std::string w = write_all(fd, answer.data(), answer.size(), a.deadline); !w.empty())
      return "sending the proof: " + w;
    Mac got{};
    if (std::string w = read_exact(fd, got.data(), got.size(), a.deadline); !w.empty())
      return "it " + w + " instead of its proof";
    const Mac want = proof(a, static_cast<uint32_t>(rank_), static_cast<uint32_t>(a.rank),
                           mine.challenge, theirs.challenge);
    if (CRYPTO_memcmp(got.data(), want.data(), want.size()) != 0)
      return "its proof does not match: it does not hold this job's secret";
    return "";
  }

  std::shared_ptr<const PairAuth> auth_;
  std::atomic<bool> authenticated_{false};
  std::string failure_;  // set by gloo's thread without the pair's lock; guarded by that thread
};

class AuthContext : public tcp::Context {
 public:
  AuthContext(std::shared_ptr<tcp::Device> device, int rank, int size,
              std::shared_ptr<const PairAuth> auth)
      : tcp::Context(std::move(device), rank, size), auth_(std::move(auth)) {}

  std::unique_ptr<gloo::transport::Pair>& createPair(int rank) override {
    pairs_[rank].reset(new AuthPair(this, device_.get(), rank, getTimeout(), auth_));
    return pairs_[rank];
  }

 private:
  std::shared_ptr<const PairAuth> auth_;
};

class AuthDevice : public tcp::Device {
 public:
  AuthDevice(const tcp::attr& attr, std::shared_ptr<const PairAuth> auth)
      : tcp::Device(attr), auth_(std::move(auth)) {}

  std::shared_ptr<gloo::transport::Context> createContext(int rank, int size) override {
    return std::make_shared<AuthContext>(
        std::static_pointer_cast<tcp::Device>(shared_from_this()), rank, size, auth_);
  }

 private:
  std::shared_ptr<const PairAuth> auth_;
};

}  // namespace

std::array<unsigned char, 32> random_secret() {
  std::array<unsigned char, 32> s{};
  std::size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      raise_errno(errno, "context create: no random bytes from the kernel (getrandom)");
    }
    got += static_cast<std::size_t>(n);
  }
  return s;
}

std::shared_ptr<const PairAuth> share_secret(const KvStore& store, const std::string& prefix,
                                             int rank, Clock::time_point deadline) {
  auto auth = std::make_shared<PairAuth>();
  auth->job = prefix;
  auth->rank = rank;
  auth->deadline = deadline;
  const std::string key = prefix + "secret";
  static constexpr char kHex[] = "0123456789abcdef";
  if (rank == 0) {
    auth->key = random_secret();
    std::string hex;
    for (unsigned char b : auth->key) hex += {kHex[b >> 4], kHex[b & 15]};
    store.set(key, hex);
    return auth;
  }
  const double left =
      deadline == Clock::time_point::max()
          ? 1e9
          : std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
  if (!store.wait(key, left))
    raise(Errc::kTimeout,
          "context create: timed out waiting for rank 0 to put the TCP channel's secret in the "
          "store (this is rank {})",
          rank);
  const std::string v = store.get(key);
  auto nibble = [](char c) {
    const char* p = c == '\0' ? nullptr : std::strchr(kHex, c);
    return p != nullptr ? static_cast<int>(p - kHex) : -1;
  };
  bool ok = v.size() == 2 * auth->key.size();
  for (std::size_t i = 0; ok && i < auth->key.size(); ++i) {
    const int hi = nibble(v[2 * i]), lo = nibble(v[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    auth->key[i] = static_cast<unsigned char>(ok ? hi * 16 + lo : 0);
  }
  if (!ok)
    raise(Errc::kInvalidUsage,
          "context create: the TCP channel's secret in the store is not {} hex digits ({} "
          "bytes): another process wrote the key '{}'",
          2 * auth->key.size(), v.size(), key);
  return auth;
}

std::shared_ptr<gloo::transport::Device> make_auth_device(const tcp::attr& attr,
                                                          std::shared_ptr<const PairAuth> auth) {
  return std::make_shared<AuthDevice>(tcp::CreateDeviceAttr(attr), std::move(auth));
}

}  // namespace fluxcpp::comm
