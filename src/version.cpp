#include "fluxcpp/version.hpp"

namespace fluxcpp {

// FLUXCPP_VERSION_* come from the project version in CMakeLists.txt.
int version() noexcept {
  return FLUXCPP_VERSION_MAJOR * 10000 + FLUXCPP_VERSION_MINOR * 100 + FLUXCPP_VERSION_PATCH;
}

}  // namespace fluxcpp
