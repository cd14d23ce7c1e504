#include "kernels/onednn_util.hpp"

#include "error_util.hpp"
#include "fluxcpp/error.hpp"

namespace fluxcpp::kernels {

dnnl::engine& dnnl_cpu_engine() {
  // Leaked on purpose: a GEMM may still run in a static destructor at exit.
  static auto* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

dnnl::stream& dnnl_thread_stream() {
  thread_local dnnl::stream s(dnnl_cpu_engine());
  return s;
}

dnnl::memory::data_type dnnl_dtype(DType d) {
  switch (d) {
    case DType::kFloat32: return dnnl::memory::data_type::f32;
    case DType::kBFloat16: return dnnl::memory::data_type::bf16;
    case DType::kFloat64: break;
  }
  raise(Errc::kInternal, "gemm: no oneDNN data type for {}", dtype_name(d));
}

dnnl::memory::desc plain_weight_desc(dnnl::memory::data_type dt, int64_t k, int64_t cols,
                                     int64_t ld, bool transposed) {
  // Element (p, j) of op(B) is B[j, p] = base[j * ld + p], or B[p, j] = base[p * ld + j].
  const dnnl::memory::dims strides =
      transposed ? dnnl::memory::dims{ld, 1} : dnnl::memory::dims{1, ld};
  return dnnl::memory::desc({k, cols}, dt, strides);
}

dnnl::memory::desc plain_weight_desc(DType d, int64_t k, int64_t cols, int64_t ld,
                                     bool transposed) {
  return plain_weight_desc(dnnl_dtype(d), k, cols, ld, transposed);
}

void raise_dnnl(const dnnl::error& e, const char* what) {
  if (e.status == dnnl_out_of_memory)
    raise(Errc::kSystem, "gemm: oneDNN is out of memory for {}", what);
  raise(Errc::kInternal, "gemm: oneDNN refused {}: {} (status {})", what, e.what(),
        static_cast<int>(e.status));
}

}  // namespace fluxcpp::kernels
