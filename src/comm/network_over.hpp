// NetworkOver: what every network with a channel of its own (MpiNetwork, GlooNetwork) hands out
// the same way: an op's Transport and its P2pNet are that network's types, made on the channel
// (an MPI communicator, the gloo channel). The rest of Network is each network's.
//
// The members are defined here but instantiated only where the network instantiates them
// explicitly (its .cpp, where its Transport and P2pNet types are complete): its header declares
// `extern template class NetworkOver<...>`.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "comm/network.hpp"

namespace fluxcpp::comm {

template <class Channel, class TransportType, class P2pNetType>
class NetworkOver : public Network {
 public:
  std::unique_ptr<Transport> transport(const Parts& ctx, const char* op,
                                       std::size_t chunk_bytes) override;
  std::unique_ptr<P2pNet> p2p(const Parts& ctx, const char* op, std::size_t slot_bytes,
                              int num_slots, const std::vector<int>& peers) override;

 protected:
  explicit NetworkOver(Channel channel) : channel_(std::move(channel)) {}

  Channel channel_;  // what the ops' transports and pairs are made on
};

template <class Channel, class TransportType, class P2pNetType>
std::unique_ptr<Transport> NetworkOver<Channel, TransportType, P2pNetType>::transport(
    const Parts& ctx, const char* op, std::size_t chunk_bytes) {
  return std::make_unique<TransportType>(ctx, channel_, op, chunk_bytes);
}

template <class Channel, class TransportType, class P2pNetType>
std::unique_ptr<P2pNet> NetworkOver<Channel, TransportType, P2pNetType>::p2p(
    const Parts& ctx, const char* op, std::size_t slot_bytes, int num_slots,
    const std::vector<int>& peers) {
  return std::make_unique<P2pNetType>(ctx, channel_, op, slot_bytes, num_slots, peers);
}

}  // namespace fluxcpp::comm
