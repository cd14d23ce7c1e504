#include "comm/gloo_network.hpp"

#include "comm/context_impl.hpp"
#include "comm/gloo_p2p_net.hpp"
#include "comm/gloo_record_swap.hpp"
#include "comm/gloo_transport.hpp"

namespace fluxcpp::comm {

std::unique_ptr<Transport> GlooNetwork::transport(detail::ContextImpl& ctx, const char* op,
                                                  std::size_t chunk_bytes) {
  return std::make_unique<GlooTransport>(ctx, net_, op, chunk_bytes);
}

std::unique_ptr<P2pNet> GlooNetwork::p2p(detail::ContextImpl& ctx, const char* op,
                                         std::size_t slot_bytes, int num_slots,
                                         const std::vector<int>& peers) {
  return std::make_unique<GlooP2pNet>(ctx, net_, op, slot_bytes, num_slots, peers);
}

RecordSwap GlooNetwork::rail_swap(const detail::ContextImpl& ctx, std::string what) {
  // The rail: this host rank's rank on every host, in host order.
  std::vector<int> members;
  for (int n = 0; n < ctx.num_nodes(); ++n)
    members.push_back(ctx.world_rank_of(n, ctx.node_rank()));
  return RecordSwap(std::make_unique<GlooRecordSwap>(net_, std::move(members), ctx.node_id(),
                                                     ctx.creating_serial(), std::move(what)));
}

}  // namespace fluxcpp::comm
