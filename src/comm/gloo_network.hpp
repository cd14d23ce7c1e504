// GlooNetwork: the network (comm/network.hpp) of a context made from a store whose ranks span
// hosts: one gloo channel (comm/gloo_net.hpp) shared by the control plane (GlooGroup) and every
// op, each op on the slots of its create serial.
#pragma once

#include <memory>

#include "comm/gloo_net.hpp"
#include "comm/network_over.hpp"

namespace fluxcpp::comm {

class GlooTransport;
class GlooP2pNet;
using GlooNetworkBase = NetworkOver<std::shared_ptr<GlooNet>, GlooTransport, GlooP2pNet>;
extern template class NetworkOver<std::shared_ptr<GlooNet>, GlooTransport, GlooP2pNet>;

class GlooNetwork final : public GlooNetworkBase {
 public:
  explicit GlooNetwork(std::shared_ptr<GlooNet> net) : GlooNetworkBase(std::move(net)) {}

  // The channel (the context's control plane rides on it too).
  const std::shared_ptr<GlooNet>& net() const { return channel_; }

  const char* name() const override { return "gloo"; }
  std::unique_ptr<RecordSwap> rail_swap(const Parts& ctx, std::string what) override;
  void check_hosts(int) const override {}
  // A channel that failed (a host gone, the link cut) was reported by the call that hit it;
  // nothing collective can cross it any more.
  bool usable() const override { return channel_->failure().empty(); }
};

}  // namespace fluxcpp::comm
