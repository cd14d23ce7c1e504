// A library not configured with FLUXCPP_FAULT_INJECTION ignores FLUXCPP_TEST_FAULT: src/fault.cpp
// compiled here without the definition (as in every build but the tests') neither kills nor
// stops the process at the named point.
#include <gtest/gtest.h>

#include <cstdlib>

#include "fault.hpp"

namespace {

TEST(FaultInjection, IgnoredUnlessBuiltForTheTests) {
  for (const char* action : {"kill", "stop"}) {
    ASSERT_EQ(setenv("FLUXCPP_TEST_FAULT", (std::string("create:0:") + action).c_str(), 1), 0);
    fluxcpp::fault_point("create", 0);  // a build that honoured it would end or stop here
  }
  SUCCEED();
}

}  // namespace
