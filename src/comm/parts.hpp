// Parts: what the ops and the network's channels use of a context — its pieces, not the whole.
//
//   topo()     where the ranks are (comm/topology.hpp), a plain value
//   runtime()  config, wait policy, deadline, comm streams, compute workers (comm/runtime.hpp)
//   life()     closed/broken state, creator process, owner thread, op serial (comm/lifecycle.hpp)
//   control()  the control plane: a group of every rank (comm/group.hpp)
//   host()     this rank's host as a shm::HostTeam (segments are allocated over it)
//   network()  how the hosts talk (comm/network.hpp); comm::no_network() on one host and once
//              the context released its resources
//
// The context (comm/context_impl.hpp) owns the pieces and its one Parts; an op holds that Parts
// through a shared pointer that keeps the context alive (ops::OpBase), so an op may outlive the
// caller's handle on its context.
#pragma once

#include <memory>

#include "comm/group.hpp"
#include "comm/lifecycle.hpp"
#include "comm/network.hpp"
#include "comm/runtime.hpp"
#include "comm/topology.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::detail {
class ContextImpl;
}

namespace fluxcpp::comm {

class Parts {
 public:
  const Topology& topo() const { return *topo_; }
  Runtime& runtime() const { return *runtime_; }
  Lifecycle& life() const { return *life_; }
  Group& control() const { return *control_; }
  shm::HostTeam& host() const { return *host_; }
  Network& network() const { return net_ != nullptr ? *net_ : no_network(); }

 private:
  friend class detail::ContextImpl;
  const Topology* topo_ = nullptr;
  Runtime* runtime_ = nullptr;
  Lifecycle* life_ = nullptr;
  Group* control_ = nullptr;
  shm::HostTeam* host_ = nullptr;
  Network* net_ = nullptr;
};

// The pieces of `ctx` through a pointer that keeps `ctx` alive (what an op holds); null for a
// null `ctx`.
std::shared_ptr<const Parts> parts_of(const std::shared_ptr<detail::ContextImpl>& ctx);

}  // namespace fluxcpp::comm
