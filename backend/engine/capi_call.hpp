// The engine is a client of fluxcpp's C ABI, as any framework is: a failed call becomes an
// exception carrying the library's status and message.
#pragma once

#include <stdexcept>
#include <string>

#include "fluxcpp/fluxcpp.h"

namespace fluxcpp::backend {

class Failure : public std::runtime_error {
 public:
  Failure(fluxcpp_status_t status, const std::string& what)
      : std::runtime_error(what), status_(status) {}
  fluxcpp_status_t status() const { return status_; }

 private:
  fluxcpp_status_t status_;
};

// "fluxcpp backend: <call>: <status>: <the library's message>"; a timeout reads "Timed out"
// as torch's own backends say it (PyTorch's suite matches on it).
inline void check(fluxcpp_status_t s, const char* call) {
  if (s != FLUXCPP_SUCCESS)
    throw Failure(s, std::string("fluxcpp backend: ") + call + ": " +
                         (s == FLUXCPP_ERROR_TIMEOUT ? std::string("Timed out (timeout)")
                                                     : std::string(fluxcpp_status_string(s))) +
                         ": " + fluxcpp_last_error());
}

}  // namespace fluxcpp::backend
