// fluxcpp/all_reduce.hpp: AllReduce with a fixed summation order, bitwise identical on every rank.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct AllReduceOptions {
  int64_t max_count = 0;  // largest element count a forward may pass (>= 1)
  DType dtype = DType::kFloat32;
};

namespace detail {
class AllReduceImpl;
}

class FLUXCPP_API AllReduce {
 public:
  // Collective: every rank passes the same options, else every rank throws kInvalidArgument.
  AllReduce(const Context& ctx, const AllReduceOptions& options);
  AllReduce(AllReduce&&) noexcept;
  AllReduce& operator=(AllReduce&&) noexcept;
  ~AllReduce();  // noexcept; never communicates

  // Collective, blocking. input and output are `count` contiguous elements; output = the sum over
  // ranks of input. count <= max_count, the same on every rank, any value (no divisibility);
  // count == 0 is a no-op. input == output reduces in place; any other overlap is
  // kInvalidArgument. The sum is taken in a fixed order that depends only on the world size and
  // the placement of the ranks on hosts (within each host by local rank, in the accumulation
  // type; then the hosts' sums by host index), accumulated in f32 (f64 for f64) and rounded once:
  // the result is bitwise identical on every rank and from call to call, whichever algorithm the
  // size selects (docs/ops/all_reduce.md).
  void forward(const void* input, int64_t count, void* output);

  // Zero-copy input (not collective), as AllGather::input_buffer: room for max_count elements.
  void* input_buffer();

  const AllReduceOptions& options() const;

 private:
  std::unique_ptr<detail::AllReduceImpl> impl_;
};

}  // namespace fluxcpp
