#include "kernels/packed_weight.hpp"

#include <string>

#include "error_util.hpp"
#include "fluxcpp/error.hpp"
#include "kernels/omp_threads.hpp"
#include "kernels/onednn_util.hpp"
#include "kernels/packed_layout.hpp"

namespace fluxcpp::kernels {
namespace {

// The rows of the matmul the layout is chosen for. oneDNN's choice does not depend on M on the
// CPUs measured (docs/design.md); a tile whose matmul asks for another layout is still correct.
constexpr int64_t kLayoutRows = 64;

}  // namespace

PackedWeight::PackedWeight(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
                           int64_t ld)
    : dtype_(dtype), n_(n), k_(k), transposed_(transposed) {
  FLUXCPP_CHECK_ARG(dtype == DType::kFloat32 || dtype == DType::kBFloat16,
                    "pack_weight: dtype {} cannot be packed (f32 and bf16 only)",
                    dtype_name(dtype));
  FLUXCPP_CHECK_ARG(n > 0 && k > 0, "pack_weight: shape n={} k={} must be positive", n, k);
  OmpThreadsScope one(1);
  try {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc src({kLayoutRows, k}, dnnl_dtype(dtype), {k, 1});
    const dnnl::memory::desc any({k, n}, dnnl_dtype(dtype), dnnl::memory::format_tag::any);
    const dnnl::memory::desc dst({kLayoutRows, n}, dt::f32, {n, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, any, dst), dnnl_cpu_engine());
    layout_ = std::make_unique<PackedLayout>();
    layout_->desc = pd.weights_desc();
    layout_->mem = dnnl::memory(layout_->desc, dnnl_cpu_engine());
  } catch (const dnnl::error& e) {
    raise_dnnl(e, "the packed layout of a weight");
  }
  update(weight, ld);
}

PackedWeight::~PackedWeight() = default;

void PackedWeight::update(const void* weight, int64_t ld) {
  const int64_t width = transposed_ ? n_ : k_;
  if (ld == 0) ld = width;
  FLUXCPP_CHECK_ARG(ld >= width, "pack_weight: ld={} < row width {}", ld, width);
  FLUXCPP_CHECK_ARG(weight != nullptr, "pack_weight: weight is null");
  OmpThreadsScope one(1);
  layout_->clear_slabs();  // packed anew from the new weight when next used
  try {
    const dnnl::memory::desc plain = plain_weight_desc(dtype_, k_, n_, ld, transposed_);
    dnnl::memory src(plain, dnnl_cpu_engine(), const_cast<void*>(weight));
    dnnl::reorder(src, layout_->mem).execute(dnnl_thread_stream(), src, layout_->mem);
    dnnl_thread_stream().wait();
  } catch (const dnnl::error& e) {
    raise_dnnl(e, "packing a weight");
  }
}

std::size_t PackedWeight::bytes() const {
  return layout_->desc.get_size() + layout_->slab_bytes();
}

const void* PackedLayout::columns(int64_t n0, int64_t n1, const dnnl::memory::desc& want) {
  const int64_t k = desc.data.dims[0], n = desc.data.dims[1];
  if (n0 == 0 && n1 == n && want == desc) return mem.get_data_handle();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slabs_.find({n0, n1});
  if (it != slabs_.end() && it->second.get_desc() == want) return it->second.get_data_handle();
  // Unpack the whole weight to a plain [k, n], then pack its columns [n0, n1) as asked.
  dnnl::memory plain({{k, n}, desc.data_type(), dnnl::memory::dims{n, 1}}, dnnl_cpu_engine());
  dnnl::memory src = mem;
  dnnl::reorder(src, plain).execute(dnnl_thread_stream(), src, plain);
  const std::size_t elem = dnnl::memory::data_type_size(desc.data_type());
  dnnl::memory cols({{k, n1 - n0}, desc.data_type(), dnnl::memory::dims{n, 1}}, dnnl_cpu_engine(),
                    static_cast<char*>(plain.get_data_handle()) + n0 * elem);
  dnnl::memory slab(want, dnnl_cpu_engine());
  dnnl::reorder(cols, slab).execute(dnnl_thread_stream(), cols, slab);
  dnnl_thread_stream().wait();
  slabs_[{n0, n1}] = slab;
  return slab.get_data_handle();
}

void PackedLayout::clear_slabs() {
  std::lock_guard<std::mutex> lock(mu_);
  slabs_.clear();
}

std::size_t PackedLayout::slab_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t b = 0;
  for (const auto& [range, m] : slabs_) b += m.get_desc().get_size();
  return b;
}

}  // namespace fluxcpp::kernels
