// GlooGroup: the control plane of a context made from a store whose ranks span hosts: the
// group's collectives over the gloo channel (comm/gloo_net.hpp), each rank sending its part to
// every other on the next control slot. Bounded by the current DeadlineScope like every Group: at
// the deadline it raises kTimeout naming the ranks whose part did not arrive (and the channel is
// closed: see gloo_net.hpp).
#pragma once

#include <memory>

#include "comm/gloo_net.hpp"
#include "comm/group.hpp"

namespace fluxcpp::comm {

class GlooGroup : public Group {
 public:
  explicit GlooGroup(std::shared_ptr<GlooNet> net) : net_(std::move(net)) {}
  int rank() const override { return net_->rank(); }
  int size() const override { return net_->size(); }
  void allgather(const void* mine, void* all, std::size_t bytes) override;
  void check_in(uint64_t token, const char* step,
                const std::function<int(int)>& name_of = {}) override;

 private:
  // allgather naming the step in a timeout.
  void exchange(const void* mine, void* all, std::size_t bytes, const char* step,
                const std::function<int(int)>& name_of);
  std::shared_ptr<GlooNet> net_;
};

}  // namespace fluxcpp::comm
