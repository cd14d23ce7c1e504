// Private helpers for raising fluxcpp::Error with formatted messages.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "fluxcpp/error.hpp"

namespace fluxcpp {

template <typename... Args>
[[noreturn]] void raise(Errc code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

// Raises kSystem with the text of `err` (an errno value) appended.
template <typename... Args>
[[noreturn]] void raise_errno(int err, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(Errc::kSystem, fmt::format("{}: {}", fmt::format(f, std::forward<Args>(args)...),
                                         std::strerror(err)));
}

}  // namespace fluxcpp

// Argument check: raises kInvalidArgument with the formatted message when cond is false.
#define FLUXCPP_CHECK_ARG(cond, ...)                                               \
  do {                                                                             \
    if (!(cond)) ::fluxcpp::raise(::fluxcpp::Errc::kInvalidArgument, __VA_ARGS__); \
  } while (0)
