// fluxcpp/error.hpp: the one exception type of the C++ API.
#pragma once

#include <stdexcept>
#include <string>

#include "fluxcpp/export.h"

namespace fluxcpp {

// Values match fluxcpp_status_t in the C ABI.
enum class Errc : int {
  kInvalidArgument = 1,  // bad shape, pointer, dtype, or ranks that disagree
  kInvalidUsage = 2,     // wrong call order, MPI not initialised, thread level too low, broken op
  kSystem = 3,           // shm, mmap, threads; the message carries errno text
  kMpi = 4,
  kTimeout = 5,  // a peer did not signal within the timeout
  kInternal = 6,
};

FLUXCPP_API const char* errc_name(Errc code) noexcept;

class FLUXCPP_API Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace fluxcpp
