// Authenticated gloo TCP pairs: nobody but the job's own ranks on the channel.
//
// gloo's TCP pair accepts the first connection on its listening socket and checks nothing, and
// its I/O thread lets an exception out (std::terminate) on bytes it cannot parse. A process that
// reads the listening ports from /proc/net/tcp could take a rank's place, or kill the job with
// one junk header. The device made here creates pairs (AuthPair, gloo_auth.cpp) that, once gloo
// has connected them and before a byte of gloo's protocol crosses, run a challenge-response
// handshake: each side sends (magic, its rank, the rank it expects, a fresh 32-byte challenge),
// then an HMAC-SHA256 keyed by the job's secret over (the job, sender, receiver, the receiver's
// challenge, the sender's challenge). A stranger cannot answer (it lacks the secret), a
// reflected message names the wrong sender and a replayed one answers another challenge. The
// secret: 32 random bytes rank 0 puts in the store; what the job trusts is the store
// (docs/design.md, "The TCP channel's peers").
//
// Whatever the pair's I/O thread throws (a peer's junk, a refused connect) closes that pair with
// the error instead of ending the process: the ranks waiting on it get the error.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "comm/kv_store.hpp"

namespace gloo::transport {
class Device;
namespace tcp {
struct attr;
}
}  // namespace gloo::transport

namespace fluxcpp::comm {

struct PairAuth {
  std::array<unsigned char, 32> key{};  // the job's secret
  std::string job;                      // names this create's meeting (rank 0's nonce)
  int rank = 0;                         // this rank
  std::chrono::steady_clock::time_point deadline;  // of the create
};

// 32 random bytes from the kernel (getrandom); kSystem when it has none to give.
std::array<unsigned char, 32> random_secret();

// Collective over the create's ranks: rank 0 puts a random secret in the store under
// `prefix` + "secret" (in hex: a store may keep text only), the others wait for it until
// `deadline` (kTimeout) and read it (kInvalidUsage when it is not the secret's form).
std::shared_ptr<const PairAuth> share_secret(const KvStore& store, const std::string& prefix,
                                             int rank,
                                             std::chrono::steady_clock::time_point deadline);

// gloo::transport::tcp::CreateDevice(attr), but its contexts' pairs authenticate (above).
std::shared_ptr<gloo::transport::Device> make_auth_device(
    const gloo::transport::tcp::attr& attr, std::shared_ptr<const PairAuth> auth);

}  // namespace fluxcpp::comm
