// The public op classes (include/fluxcpp/*.hpp) hold their implementation behind a
// std::unique_ptr and are movable: the part every one of them writes alike.
#pragma once

#include <memory>

#include "error_util.hpp"

namespace fluxcpp::ops {

// The implementation of a public op, or kInvalidUsage "<op>: use of a moved-from op".
template <class Impl>
Impl& checked(const std::unique_ptr<Impl>& p, const char* op) {
  if (!p) raise(Errc::kInvalidUsage, "{}: use of a moved-from op", op);
  return *p;
}

}  // namespace fluxcpp::ops

// The move constructor, move assignment and destructor of public class `Class`, defined where
// its implementation type is complete.
#define FLUXCPP_PIMPL_MOVES(Class)                     \
  Class::Class(Class&&) noexcept = default;            \
  Class& Class::operator=(Class&&) noexcept = default; \
  Class::~Class() = default

// Those, and the options() every public op has: `const Options& Class::options() const`.
#define FLUXCPP_PUBLIC_OP(Class, Options, op) \
  FLUXCPP_PIMPL_MOVES(Class);                 \
  const Options& Class::options() const {     \
    return ops::checked(impl_, op).options(); \
  }                                           \
  static_assert(true, "")

// Those, and the constructor of a public op made collectively by ops::make_op from its
// implementation detail::<Class>Impl.
#define FLUXCPP_PUBLIC_MADE_OP(Class, Options, op)                        \
  Class::Class(const Context& ctx, const Options& options)               \
      : impl_(ops::make_op<detail::Class##Impl>(ctx.impl(), options)) {} \
  FLUXCPP_PUBLIC_OP(Class, Options, op)

// The zero-copy input_buffer() of a public op.
#define FLUXCPP_PUBLIC_INPUT_BUFFER(Class, op)     \
  void* Class::input_buffer() {                    \
    return ops::checked(impl_, op).input_buffer(); \
  }
