// fluxcpp/version.hpp
#pragma once

#include "fluxcpp/export.h"

namespace fluxcpp {

// major*10000 + minor*100 + patch of the library actually loaded.
FLUXCPP_API int version() noexcept;

}  // namespace fluxcpp
