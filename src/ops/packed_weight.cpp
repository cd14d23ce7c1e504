// The public PackedWeight over the GEMM engine's (kernels/gemm_packed_weight.hpp).
#include "fluxcpp/packed_weight.hpp"

#include "error_util.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/tiled_gemm.hpp"

namespace fluxcpp {

PackedWeight::PackedWeight(const Context& ctx, DType dtype, const void* weight, int64_t n,
                           int64_t k, bool transpose_weight)
    : impl_(std::make_unique<kernels::PackedWeight>(
          dtype, weight, n, k, transpose_weight, 0,
          ops::column_slabs(comm::parts_of(ctx.impl())->runtime().num_compute_workers(), 0, n))) {}
FLUXCPP_PIMPL_MOVES(PackedWeight);

const kernels::PackedWeight& PackedWeight::impl() const {
  return ops::checked(impl_, "packed_weight");
}

void PackedWeight::update(const void* weight) {
  impl();
  impl_->update(weight);
}
DType PackedWeight::dtype() const {
  return impl().dtype();
}
int64_t PackedWeight::n() const {
  return impl().n();
}
int64_t PackedWeight::k() const {
  return impl().k();
}
bool PackedWeight::transpose_weight() const {
  return impl().transposed();
}
std::size_t PackedWeight::bytes() const {
  return impl().bytes();
}

}  // namespace fluxcpp
