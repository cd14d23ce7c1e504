#include "comm/transport.hpp"

#include <algorithm>

#include "comm/parts.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

Transport::Transport(const Parts& ctx, const char* op, std::size_t chunk_bytes)
    : ctx_(&ctx), op_(op), chunk_(std::max<std::size_t>(chunk_bytes, 4096)) {}

std::string Transport::timeout_text(const char* network, const Transfer* late, std::size_t have,
                                    bool unproduced) const {
  const Parts& c = *ctx_;
  if (late == nullptr)
    return fmt::format("{}: timed out after {} s in {} transfers (this is rank {})", op_,
                       c.runtime().config().timeout_s, network, c.topo().world_rank());
  return fmt::format(
      "{}: timed out after {} s waiting for rank {} (host {}, local rank {}) over {}: {} {} of "
      "{} bytes{} (this is rank {})",
      op_, c.runtime().config().timeout_s, late->peer, c.topo().host_of(late->peer),
      c.topo().local_of(late->peer), network, late->send ? "it received" : "received", have,
      late->bytes, unproduced ? " (this rank had not produced the rest)" : "",
      c.topo().world_rank());
}

}  // namespace fluxcpp::comm
