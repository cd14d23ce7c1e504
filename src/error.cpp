#include "fluxcpp/error.hpp"

namespace fluxcpp {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kInvalidArgument: return "invalid argument";
    case Errc::kInvalidUsage: return "invalid usage";
    case Errc::kSystem: return "system error";
    case Errc::kMpi: return "MPI error";
    case Errc::kTimeout: return "timeout";
    case Errc::kInternal: return "internal error";
  }
  return "unknown error";
}

}  // namespace fluxcpp
