// Private helpers for raising fluxcpp::Error with formatted messages.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#include "fluxcpp/error.hpp"

namespace fluxcpp {

// An error every rank of a collective step raised alike, having taken part in it (comm::agree,
// comm::agree_value, the per-call handshake): the peers are where this rank is, so it breaks
// nothing. Callers see a plain Error.
class AgreedError : public Error {
 public:
  using Error::Error;
};

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

// Resizes `c` (a std::vector or std::string) to n elements. An allocation failure raises
// kSystem naming the op, the buffer and the bytes: "ag_gemm: cannot allocate 4294967296 bytes
// for the gather buffer: out of memory", rather than a bare std::bad_alloc.
template <typename Container>
void resize_or_raise(Container& c, std::size_t n, const char* op, const char* what) {
  constexpr std::size_t elem = sizeof(typename Container::value_type);
  try {
    c.resize(n);
  } catch (const std::bad_alloc&) {
    // n <= max_size() here, so n * elem fits in size_t.
    raise(Errc::kSystem, "{}: cannot allocate {} bytes for {}: out of memory", op, n * elem, what);
  } catch (const std::length_error&) {
    raise(Errc::kSystem,
          "{}: cannot allocate {} elements of {} bytes for {}: more than the address space", op, n,
          elem, what);
  }
}

}  // namespace fluxcpp

// Argument check: raises kInvalidArgument with the formatted message when cond is false.
#define FLUXCPP_CHECK_ARG(cond, ...)                                               \
  do {                                                                             \
    if (!(cond)) ::fluxcpp::raise(::fluxcpp::Errc::kInvalidArgument, __VA_ARGS__); \
  } while (0)
