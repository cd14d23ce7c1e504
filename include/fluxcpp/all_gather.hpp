// fluxcpp/all_gather.hpp: AllGather of row blocks, within a host through symmetric shared memory,
// across hosts through MPI driven by a comm thread (hierarchical when both).
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct AllGatherOptions {
  int64_t max_m = 0;  // largest total row count a forward may pass
  int64_t k = 0;      // row length in elements (>= 1)
  DType dtype = DType::kFloat32;
};

namespace detail {
class AllGatherImpl;
}

class FLUXCPP_API AllGather {
 public:
  // Collective: plans the op and allocates its symmetric buffers. Every rank must pass the same
  // options; otherwise every rank throws Error(kInvalidArgument) naming the argument.
  AllGather(const Context& ctx, const AllGatherOptions& options);
  AllGather(AllGather&&) noexcept;
  AllGather& operator=(AllGather&&) noexcept;
  ~AllGather();  // noexcept; never communicates

  // Collective, blocking. input [m/W, k]; output [m, k] with rank s's rows at [s*m/W, (s+1)*m/W).
  // m % W == 0, m <= max_m, every rank passes the same m; m == 0 is a no-op. input may be the
  // own block of output (in place). After a timeout the op is broken and must be destroyed.
  void forward(const void* input, int64_t m, void* output);

  // Zero-copy input (not collective): waits until every peer has finished reading this rank's
  // slot for the previous forward (kTimeout naming the peer otherwise) and returns it: room for
  // max_m/W rows. Write this call's input there and pass it to forward as `input`: forward then
  // skips copying it. Call it again before each write; the address stays the same.
  void* input_buffer();

  const AllGatherOptions& options() const;

 private:
  std::unique_ptr<detail::AllGatherImpl> impl_;
};

}  // namespace fluxcpp
