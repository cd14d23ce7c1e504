// The routes of a point-to-point op (AsyncSendRecv) from every rank's peer list: which listed
// peers share this rank's host (they meet in shared memory, each pair at its positions in the two
// ranks' host lists) and which comm::P2pNet reaches. Worked out here, once, so that the op never
// asks which host a peer is on.
#pragma once

#include <vector>

#include "ops/core/links.hpp"

namespace fluxcpp::ops {

struct PairRoute {
  int rank = -1;
  int local = -1;              // the peer's local rank on this host; -1: on another host
  int mine = -1, theirs = -1;  // on this host: the peer's position among this rank's host peers,
                               // and this rank's among the peer's
  int net = -1;                // on another host: its index in net_peers()
};

class PairPlan {
 public:
  // all: every rank's list of `width` world ranks, padded with -1 (rank a's at a·width).
  PairPlan(const Links& links, const std::vector<int>& all, int width);

  // Whether some rank lists a peer on another host (messages then travel over the network).
  bool crosses_hosts() const { return crosses_; }
  // This rank's peers in the order of its list, each with its route.
  const std::vector<PairRoute>& routes() const { return routes_; }
  // The most host peers any rank of this host lists: the width of the op's slot layout.
  int host_slots() const { return host_slots_; }
  // This rank's peers on other hosts, in list order.
  const std::vector<int>& net_peers() const { return net_peers_; }
  // Whether the context has ranks on other hosts: every rank then opens the network channel
  // (a collective), with or without peers there.
  bool networked() const { return networked_; }
  // This rank's row in the host's slot arrays (its local rank).
  int self() const { return self_; }

 private:
  bool crosses_ = false, networked_ = false;
  int host_slots_ = 0, self_ = 0;
  std::vector<PairRoute> routes_;
  std::vector<int> net_peers_;
};

}  // namespace fluxcpp::ops
