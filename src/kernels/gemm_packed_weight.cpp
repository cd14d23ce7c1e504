#include "kernels/gemm_packed_weight.hpp"

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

void run_reorder(dnnl::memory& src, dnnl::memory& dst) {
  dnnl::reorder(src, dst).execute(dnnl_thread_stream(), src, dst);
  dnnl_thread_stream().wait();
}

}  // namespace

dnnl::memory::desc PackedLayout::layout_for(dnnl::memory::data_type dt, int64_t k, int64_t cols) {
  const dnnl::memory::desc src({kLayoutRows, k}, dt, {k, 1});
  const dnnl::memory::desc any({k, cols}, dt, dnnl::memory::format_tag::any);
  const dnnl::memory::desc dst({kLayoutRows, cols}, dnnl::memory::data_type::f32, {cols, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, any, dst), dnnl_cpu_engine())
      .weights_desc();
}

void PackedLayout::add(const dnnl::memory& plain, int64_t n0, int64_t n1, int64_t ld,
                       bool transposed) {
  const dnnl::memory::desc& pd = plain.get_desc();
  const int64_t k = pd.data.dims[0];
  const dnnl::memory::data_type dt = pd.data_type();
  const std::size_t elem = dnnl::memory::data_type_size(dt);
  // Columns n0.. of op(B): rows n0.. of [n, k], or columns n0.. of [k, n].
  const int64_t off = transposed ? n0 : n0 * ld;
  dnnl::memory cols(plain_weight_desc(dt, k, n1 - n0, ld, transposed), dnnl_cpu_engine(),
                    static_cast<char*>(plain.get_data_handle()) + off * static_cast<int64_t>(elem));
  PackedSlab s{n0, n1, dnnl::memory(layout_for(dt, k, n1 - n0), dnnl_cpu_engine())};
  run_reorder(cols, s.mem);
  std::lock_guard<std::mutex> lock(mu_);
  slabs_.push_back(std::move(s));
}

void PackedLayout::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  slabs_.clear();
}

const PackedSlab* PackedLayout::find(int64_t n0, int64_t n1, const dnnl::memory::desc& want) const {
  for (const PackedSlab& s : slabs_)
    if (s.n0 == n0 && s.n1 == n1 && s.mem.get_desc() == want) return &s;
  return nullptr;
}

const void* PackedLayout::columns(int64_t n0, int64_t n1, const dnnl::memory::desc& want) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const PackedSlab* s = find(n0, n1, want)) return s->mem.get_data_handle();
  // Not planned: unpack the whole weight to a plain [k, n] and pack the columns as asked.
  dnnl::memory whole = slabs_.front().mem;
  const int64_t k = whole.get_desc().data.dims[0], n = whole.get_desc().data.dims[1];
  const dnnl::memory::data_type dt = whole.get_desc().data_type();
  dnnl::memory plain({{k, n}, dt, dnnl::memory::dims{n, 1}}, dnnl_cpu_engine());
  run_reorder(whole, plain);
  const std::size_t elem = dnnl::memory::data_type_size(dt);
  dnnl::memory cols({{k, n1 - n0}, dt, dnnl::memory::dims{n, 1}}, dnnl_cpu_engine(),
                    static_cast<char*>(plain.get_data_handle()) + n0 * static_cast<int64_t>(elem));
  PackedSlab s{n0, n1, dnnl::memory(want, dnnl_cpu_engine())};
  run_reorder(cols, s.mem);
  slabs_.push_back(std::move(s));  // a deque: the addresses handed out before stay valid
  return slabs_.back().mem.get_data_handle();
}

std::size_t PackedLayout::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t b = 0;
  for (const PackedSlab& s : slabs_) b += s.mem.get_desc().get_size();
  return b;
}

PackedWeight::PackedWeight(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
                           int64_t ld, ColumnSlabs slabs)
    : dtype_(dtype), n_(n), k_(k), transposed_(transposed), slabs_(std::move(slabs)) {
  FLUXCPP_CHECK_ARG(dtype == DType::kFloat32 || dtype == DType::kBFloat16,
                    "pack_weight: dtype {} cannot be packed (f32 and bf16 only)",
                    dtype_name(dtype));
  FLUXCPP_CHECK_ARG(n > 0 && k > 0, "pack_weight: shape n={} k={} must be positive", n, k);
  for (const auto& [n0, n1] : slabs_)
    FLUXCPP_CHECK_ARG(0 <= n0 && n0 < n1 && n1 <= n,
                      "pack_weight: bad column slab [{}, {}) of n={}", n0, n1, n);
  layout_ = std::make_unique<PackedLayout>();
  update(weight, ld);
}

PackedWeight::~PackedWeight() = default;

void PackedWeight::update(const void* weight, int64_t ld) {
  const int64_t width = transposed_ ? n_ : k_;
  if (ld == 0) ld = width;
  FLUXCPP_CHECK_ARG(ld >= width, "pack_weight: ld={} < row width {}", ld, width);
  FLUXCPP_CHECK_ARG(weight != nullptr, "pack_weight: weight is null");
  OmpThreadsScope one(1);
  layout_->clear();
  try {
    const dnnl::memory plain(plain_weight_desc(dtype_, k_, n_, ld, transposed_), dnnl_cpu_engine(),
                             const_cast<void*>(weight));
    layout_->add(plain, 0, n_, ld, transposed_);  // the whole weight first
    for (const auto& [n0, n1] : slabs_)
      if (n1 - n0 < n_) layout_->add(plain, n0, n1, ld, transposed_);
  } catch (const dnnl::error& e) {
    raise_dnnl(e, "packing a weight");
  }
}

std::size_t PackedWeight::bytes() const {
  return layout_->bytes();
}

}  // namespace fluxcpp::kernels
