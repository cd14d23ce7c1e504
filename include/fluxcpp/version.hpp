// fluxcpp/version.hpp
#pragma once

namespace fluxcpp {

// major*10000 + minor*100 + patch of the library actually loaded.
int version() noexcept;

}  // namespace fluxcpp
