#include "comm/gloo_network.hpp"

#include "comm/gloo_p2p_net.hpp"
#include "comm/gloo_record_swap.hpp"
#include "comm/gloo_transport.hpp"
#include "comm/parts.hpp"

namespace fluxcpp::comm {

template class NetworkOver<std::shared_ptr<GlooNet>, GlooTransport, GlooP2pNet>;

std::unique_ptr<RecordSwap> GlooNetwork::rail_swap(const Parts& ctx, std::string what) {
  // The rail: this host rank's rank on every host, in host order.
  std::vector<int> members;
  for (int n = 0; n < ctx.topo().num_hosts(); ++n)
    members.push_back(ctx.topo().world_rank_of(n, ctx.topo().host_rank()));
  return std::make_unique<GlooRecordSwap>(channel_, std::move(members), ctx.topo().host_id(),
                                          ctx.life().creating_serial(), std::move(what));
}

}  // namespace fluxcpp::comm
