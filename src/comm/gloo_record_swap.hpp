// GlooRecordSwap: comm/record_swap.hpp's swap over the gloo channel (a context made from a store
// whose ranks span hosts), on the op's rail slots among the members' world ranks. A member late
// at the deadline closes the channel (comm/gloo_net.hpp), so the late one fails when it arrives
// with no retraction needed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/record_swap.hpp"

namespace fluxcpp::comm {

class GlooNet;

class GlooRecordSwap : public RecordSwap {
 public:
  // `members` are the world ranks in member order, this rank is member `me`; `serial` is the
  // op's create serial (its slots). Not collective.
  GlooRecordSwap(std::shared_ptr<GlooNet> net, std::vector<int> members, int me, uint64_t serial,
                 std::string what);

  std::vector<int> swap(const Sends& sends, Deadline deadline, const BackoffPolicy& wait,
                        std::array<int64_t, 2> retraction) override;
  std::vector<std::string> gather_texts(const std::string& mine, Deadline deadline,
                                        const BackoffPolicy& wait,
                                        const std::function<std::string()>& missing) override;

 private:
  std::shared_ptr<GlooNet> net_;
  std::vector<int> members_;
  uint64_t serial_ = 0;
};

}  // namespace fluxcpp::comm
