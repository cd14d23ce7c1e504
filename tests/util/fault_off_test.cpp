// A library not configured with FLUXCPP_FAULT_INJECTION ignores FLUXCPP_TEST_FAULT: src/fault.cpp
// compiled here without the definition (as in every build but the tests') neither kills nor
// stops the process at the named point.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "fault.hpp"

namespace {

TEST(FaultInjection, IgnoredUnlessBuiltForTheTests) {
  // Read once, at the first fault point: a build that honoured it would end here.
  ASSERT_EQ(setenv("FLUXCPP_TEST_FAULT", "create:0:kill", 1), 0);
  fluxcpp::fault_point("create", 0);
  SUCCEED();
}

}  // namespace
