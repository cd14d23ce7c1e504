#include "comm/gloo_group.hpp"

#include <cstring>

#include <gloo/transport/unbound_buffer.h>

#include "comm/bounded.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

void GlooGroup::allgather(const void* mine, void* all, std::size_t bytes) {
  exchange(mine, all, bytes, "a collective", {});
}

void GlooGroup::exchange(const void* mine, void* all, std::size_t bytes, const char* step,
                         const std::function<int(int)>& name_of) {
  const int me = rank(), n = size();
  char* out = static_cast<char*>(all);
  if (bytes > 0) std::memcpy(out + bytes * me, mine, bytes);
  const uint64_t slot = net_->next_control_slot();
  if (n == 1 || bytes == 0) return;
  const std::string& scope = DeadlineScope::context();
  auto name = [&](int r) { return name_of ? name_of(r) : r; };
  if (const std::string f = net_->failure(); !f.empty())
    raise(Errc::kInvalidUsage, "{}{}the network channel failed earlier: {}", scope,
          scope.empty() ? "" : ": ", f);
  // One receive buffer per peer (gloo reports only the latest completion's rank). Any failure
  // closes the channel (GlooNet::fail), so nothing posted here outlives this call.
  std::vector<std::unique_ptr<GlooBuffer>> rx(static_cast<std::size_t>(n));
  std::unique_ptr<GlooBuffer> tx = net_->buffer(out + bytes * me, bytes);
  const Deadline deadline = DeadlineScope::current();
  std::vector<bool> got(static_cast<std::size_t>(n), false);
  got[me] = true;
  const std::string what = fmt::format("{}{}{} over the network", scope, scope.empty() ? "" : ": ",
                                       step);
  try {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      rx[p] = net_->buffer(out + bytes * p, bytes);
      net_->recv(*rx[p], p, slot, 0, bytes);
    }
    for (int p = 0; p < n; ++p)
      if (p != me) net_->send(*tx, p, slot, 0, bytes);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      net_->wait_recv(*rx[p], nullptr, deadline, what);
      got[p] = true;
    }
    for (int i = 1; i < n; ++i) net_->wait_send(*tx, deadline, what);
  } catch (const Error& e) {
    std::string missing;
    for (int p = 0; p < n; ++p)
      if (!got[p]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name(p));
    if (e.code() == Errc::kTimeout)  // the deadline (GlooNet raises kSystem for a failed pair)
      raise(Errc::kTimeout, "{}timed out in {}: rank(s) {} did not take part (this is rank {})",
            scope.empty() ? "" : scope + ": ", step, missing.empty() ? "?" : missing, name(me));
    // A pair failed: a peer is gone (its connection closed) or the channel was closed.
    raise(Errc::kTimeout, "{}{}{}: rank(s) {} gone or unreachable ({}) (this is rank {})", scope,
          scope.empty() ? "" : ": ", step, missing.empty() ? "?" : missing, e.what(), name(me));
  }
}

void GlooGroup::check_in(uint64_t token, const char* step, const std::function<int(int)>& name_of) {
  const int n = size();
  std::vector<uint64_t> got(static_cast<std::size_t>(n));
  exchange(&token, got.data(), sizeof token, step, name_of);
  const std::string& scope = DeadlineScope::context();
  for (int p = 0; p < n; ++p)
    if (got[p] != token)
      raise(Errc::kInvalidUsage,
            "{}{}ranks are at different steps: rank {} sent {:#x}, this rank (rank {}) is at "
            "{:#x} in {} (ranks must create and destroy ops in the same order)",
            scope, scope.empty() ? "" : ": ", name_of ? name_of(p) : p, got[p],
            name_of ? name_of(rank()) : rank(), token, step);
}

}  // namespace fluxcpp::comm
