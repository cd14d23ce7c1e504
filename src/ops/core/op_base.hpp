// The shape every collective op's implementation shares, written once: the context, the options,
// the link table, the segment layout and the op core, and the collective create. An op derives from
// OpBase with its options type, names itself (`static constexpr const char* kOp`) and writes one
// member, `void create(const comm::Parts& c, const std::string& local_error)`: its options list
// (ops::agree_options), its exchanges and its OpCore::Spec. make_op runs that create inside
// create_op (create.hpp: the check-in, the deadline, the failure rules).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "comm/parts.hpp"
#include "ops/core/create.hpp"
#include "ops/core/links.hpp"
#include "ops/core/op_core.hpp"
#include "shm/layout.hpp"

namespace fluxcpp::ops {

template <class Options>
class OpBase {
 public:
  OpBase(const std::shared_ptr<detail::ContextImpl>& ctx, const Options& options)
      : ctx_(comm::parts_of(ctx)), opts_(options), links_(Links::of(*ctx_)) {}
  OpBase(const OpBase&) = delete;
  OpBase& operator=(const OpBase&) = delete;

  const Options& options() const { return opts_; }

 protected:
  // The op core over the layout the create declared (collective).
  void make_core(const OpCore::Spec& spec) { core_.emplace(*ctx_, links_, spec, layout_); }

  // The context's pieces (comm/parts.hpp), through a pointer that keeps the context alive: the
  // op may outlive the caller's handle on it.
  std::shared_ptr<const comm::Parts> ctx_;
  Options opts_;
  // How this rank reaches every rank (built once, here): the op's exchanges and core read it.
  Links links_;
  // The op's named regions (its exchanges and its core declare theirs) and the core, destroyed
  // after everything the op derives (the exchanges are views into the core's segment).
  shm::Layout layout_;
  std::optional<OpCore> core_;
};

// Constructs op Impl on ctx and runs its collective create. local_error: a rank-local problem the
// API layer found, reported on every rank (see detail::ContextImpl). The op gets the context's
// pieces (comm::Parts), never the context itself.
// (An op whose constructor is itself the collective create is constructed as such.)
template <class Impl, class Options>
std::unique_ptr<Impl> make_op(std::shared_ptr<detail::ContextImpl> ctx, const Options& options,
                              const std::string& local_error = {}) {
  if constexpr (std::is_constructible_v<Impl, std::shared_ptr<detail::ContextImpl>, const Options&,
                                        const std::string&>) {
    return std::make_unique<Impl>(std::move(ctx), options, local_error);
  } else {
    auto op = std::make_unique<Impl>(ctx, options);
    const comm::Parts& parts = *comm::parts_of(ctx);
    create_op(parts, Impl::kOp, [&] { op->create(parts, local_error); });
    return op;
  }
}

}  // namespace fluxcpp::ops

// The public op classes (include/fluxcpp/<op>.hpp) hold their implementation behind a
// std::unique_ptr and are movable; each op's .cpp defines its class's members after the
// implementation, with these. The move constructor, move assignment and destructor of public
// class `Class`, defined where its implementation type is complete.
#define FLUXCPP_PIMPL_MOVES(Class)                     \
  Class::Class(Class&&) noexcept = default;            \
  Class& Class::operator=(Class&&) noexcept = default; \
  Class::~Class() = default

// Those, and the options() every public op has: `const Options& Class::options() const`.
#define FLUXCPP_PUBLIC_OP(Class, Options) \
  FLUXCPP_PIMPL_MOVES(Class);             \
  const Options& Class::options() const { \
    return ops::checked(impl_).options(); \
  }                                       \
  static_assert(true, "")

// Those, and the constructor of a public op made collectively by ops::make_op from its
// implementation detail::<Class>Impl.
#define FLUXCPP_PUBLIC_MADE_OP(Class, Options)                           \
  Class::Class(const Context& ctx, const Options& options)               \
      : impl_(ops::make_op<detail::Class##Impl>(ctx.impl(), options)) {} \
  FLUXCPP_PUBLIC_OP(Class, Options)

// The zero-copy input_buffer() of a public op.
#define FLUXCPP_PUBLIC_INPUT_BUFFER(Class)     \
  void* Class::input_buffer() {                \
    return ops::checked(impl_).input_buffer(); \
  }

// The two forwards of a GEMM op with one output (GemmRs, GemmAr): the weight as a pointer, or
// packed (fluxcpp/packed_weight.hpp).
#define FLUXCPP_PUBLIC_GEMM_FORWARDS(Class)                                                       \
  void Class::forward(const void* input, int64_t m, const void* weight, const void* bias,         \
                      void* output) {                                                             \
    ops::checked(impl_).forward(input, m, weight, bias, output);                                  \
  }                                                                                               \
  void Class::forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias, \
                      void* output) {                                                             \
    ops::checked(impl_).forward(input, m, weight.impl(), bias, output);                           \
  }                                                                                               \
  static_assert(true, "")
