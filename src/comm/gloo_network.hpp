// GlooNetwork: the network (comm/network.hpp) of a context made from a store whose ranks span
// hosts: one gloo channel (comm/gloo_net.hpp) shared by the control plane (GlooGroup) and every
// op, each op on the slots of its create serial.
#pragma once

#include <memory>

#include "comm/gloo_net.hpp"
#include "comm/network.hpp"

namespace fluxcpp::comm {

class GlooNetwork final : public Network {
 public:
  explicit GlooNetwork(std::shared_ptr<GlooNet> net) : net_(std::move(net)) {}

  // The channel (the context's control plane rides on it too).
  const std::shared_ptr<GlooNet>& net() const { return net_; }

  const char* name() const override { return "gloo"; }
  std::unique_ptr<Transport> transport(const Parts& ctx, const char* op,
                                       std::size_t chunk_bytes) override;
  std::unique_ptr<P2pNet> p2p(const Parts& ctx, const char* op, std::size_t slot_bytes,
                              int num_slots, const std::vector<int>& peers) override;
  std::unique_ptr<RecordSwap> rail_swap(const Parts& ctx, std::string what) override;
  void check_hosts(int) const override {}
  // A channel that failed (a host gone, the link cut) was reported by the call that hit it;
  // nothing collective can cross it any more.
  bool usable() const override { return net_->failure().empty(); }

 private:
  std::shared_ptr<GlooNet> net_;
};

}  // namespace fluxcpp::comm
