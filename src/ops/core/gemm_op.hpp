// The skeleton of a dense fused GEMM op (ag_gemm, a2a_gemm): its three paths — fused, the GEMM
// alone, the communication alone — as one call record, checked and dispatched in one place.
// Derived supplies, besides OpBase's create:
//   char* input_slot();                          the zero-copy input buffer (its staged slot)
//   std::size_t input_bytes(std::size_t m);      this rank's input bytes for a call of m rows
//   void run(const Call&, const GemmCall&);      the call's body on every path
// and may supply
//   void schedule(Path, const GemmCall&);    plan a call whose arguments are valid on this rank
//   void latency_payload(const GemmCall&, CallDescriptor&);  a fused call's handshake payload
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gemm.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::ops {

template <class Derived, class Options>
class GemmOpBase : public OpBase<Options> {
 public:
  using OpBase<Options>::OpBase;

  // moved: where the caller wants the communication's result (may be NULL on the fused path).
  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output,
               void* moved) {
    call(Path::kFused, GemmCall::fused(input, m, weight, bias, output, moved));
  }
  // Local: no handshake, no waits. Other ranks' rows are whatever the buffers hold.
  void forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output) {
    call(Path::kGemmOnly, GemmCall::gemm_only(input, m, weight, bias, output));
  }
  void forward_comm_only(const void* input, int64_t m, void* moved) {
    call(Path::kCommOnly, GemmCall::comm_only(input, m, moved));
  }
  void* input_buffer() { return zero_copy_.acquire(*this->core_, self().input_slot()); }

 protected:
  Derived& self() { return static_cast<Derived&>(*this); }
  // The call's schedule, planned once the arguments are valid on this rank. None by default.
  void schedule(Path /*path*/, const GemmCall& /*a*/) {}
  // The latency path (OpCore::Spec::with_payload): Derived may set d.payload for a fused call whose
  // arguments are valid on this rank. None by default.
  void latency_payload(const GemmCall& /*a*/, CallDescriptor& /*d*/) {}

  void call(Path path, const GemmCall& args) {
    const Options& o = this->opts_;
    GemmCall a = args;
    CallDescriptor d;
    d.fields = {a.m, 0, 0, 0};
    d.error =
        check_gemm_call(*this->ctx_, Derived::kOp, path, a, o.max_m,
                        {o.max_m, o.n, o.k, o.input_dtype, o.output_dtype, o.transpose_weight});
    const std::size_t m = d.error.empty() ? static_cast<std::size_t>(a.m) : 0;
    char* slot = self().input_slot();
    if (path == Path::kGemmOnly)
      a.zero_copy = a.input != nullptr && a.input == slot;
    else
      a.zero_copy = zero_copy_.check(*this->core_, slot, a.input, self().input_bytes(m),
                                     {{a.output, m * out_row_}, {a.moved, m * in_row_}}, d);
    if (d.error.empty()) self().schedule(path, a);
    if (path == Path::kFused && d.error.empty()) self().latency_payload(a, d);
    this->core_->run(path, d, a.m == 0, [&](const Call& call) { self().run(call, a); });
  }

  std::size_t in_row_ = 0, out_row_ = 0;  // bytes per row of input and output
  kernels::GemmWeight weight_;
  std::vector<char> local_;  // the exchanged rows when a call collects them first, [max_m, k]
  ZeroCopyInput zero_copy_;
};

}  // namespace fluxcpp::ops
