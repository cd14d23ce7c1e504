#include "comm/gloo_network.hpp"

#include "comm/gloo_p2p_net.hpp"
#include "comm/gloo_record_swap.hpp"
#include "comm/gloo_transport.hpp"
#include "comm/parts.hpp"

namespace fluxcpp::comm {

std::unique_ptr<Transport> GlooNetwork::transport(const Parts& ctx, const char* op,
                                                  std::size_t chunk_bytes) {
  return std::make_unique<GlooTransport>(ctx, net_, op, chunk_bytes);
}

std::unique_ptr<P2pNet> GlooNetwork::p2p(const Parts& ctx, const char* op,
                                         std::size_t slot_bytes, int num_slots,
                                         const std::vector<int>& peers) {
  return std::make_unique<GlooP2pNet>(ctx, net_, op, slot_bytes, num_slots, peers);
}

std::unique_ptr<RecordSwap> GlooNetwork::rail_swap(const Parts& ctx, std::string what) {
  // The rail: this host rank's rank on every host, in host order.
  std::vector<int> members;
  for (int n = 0; n < ctx.topo().num_hosts(); ++n)
    members.push_back(ctx.topo().world_rank_of(n, ctx.topo().host_rank()));
  return std::make_unique<GlooRecordSwap>(net_, std::move(members), ctx.topo().host_id(),
                                          ctx.life().creating_serial(), std::move(what));
}

}  // namespace fluxcpp::comm
