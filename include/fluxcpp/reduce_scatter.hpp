// fluxcpp/reduce_scatter.hpp: ReduceScatter of row blocks with a fixed summation order.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct ReduceScatterOptions {
  int64_t max_m = 0;  // largest total row count a forward may pass
  int64_t n = 0;      // row length in elements (>= 1)
  DType dtype = DType::kFloat32;
};

namespace detail {
class ReduceScatterImpl;
}

class FLUXCPP_API ReduceScatter {
 public:
  // Collective: every rank passes the same options, else every rank throws kInvalidArgument.
  ReduceScatter(const Context& ctx, const ReduceScatterOptions& options);
  ReduceScatter(ReduceScatter&&) noexcept;
  ReduceScatter& operator=(ReduceScatter&&) noexcept;
  ~ReduceScatter();  // noexcept; never communicates

  // Collective, blocking. input [m, n] on every rank; output [m/W, n] = rows
  // [r*m/W, (r+1)*m/W) of the sum over ranks of input. m % W == 0, m <= max_m, same m on every
  // rank; m == 0 is a no-op. The sum is taken in a fixed order (within a host over the local
  // ranks counting down from this rank's, its own share last; then across hosts by host),
  // accumulated in f32 (f64 for f64) and rounded once, so results are bitwise identical from call
  // to call and run to run.
  void forward(const void* input, int64_t m, void* output);

  const ReduceScatterOptions& options() const;

 private:
  std::unique_ptr<detail::ReduceScatterImpl> impl_;
};

}  // namespace fluxcpp
