// The deadline of the collectives a thread runs (comm/bounded.hpp, the groups of comm/group.hpp,
// the network's waits), set for a scope: a create or destroy opens one, and every collective
// inside it gives up at its deadline with kTimeout. Knows nothing of the network it bounds.
#pragma once

#include <chrono>
#include <string>

namespace fluxcpp::comm {

using Deadline = std::chrono::steady_clock::time_point;

// The deadline of the collectives this thread runs while the scope lives (scopes nest; the
// innermost wins), and the words a timeout starts with ("ag_gemm create", "context destroy").
class DeadlineScope {
 public:
  DeadlineScope(Deadline deadline, std::string what);
  ~DeadlineScope();
  DeadlineScope(const DeadlineScope&) = delete;
  DeadlineScope& operator=(const DeadlineScope&) = delete;
  static Deadline current();            // time_point::max() outside any scope
  static const std::string& context();  // "" outside any scope

 private:
  Deadline saved_;
  std::string saved_what_;
};

}  // namespace fluxcpp::comm
