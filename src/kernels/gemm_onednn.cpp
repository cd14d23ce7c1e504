#include "kernels/gemm_onednn.hpp"

#include <cstring>
#include <functional>
#include <unordered_map>
#include <vector>

#include "error_util.hpp"
#include "fluxcpp/error.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "kernels/omp_threads.hpp"
#include "kernels/onednn_util.hpp"
#include "kernels/packed_layout.hpp"

namespace fluxcpp::kernels {
namespace {

// Everything a primitive depends on. A tile of another height, width or stride is another
// primitive: the ops use a few tile shapes per forward, so the cache stays small.
struct Key {
  int64_t rows, cols, k, lda, ldb, ldc;  // ldb = 0: packed weight (its own layout)
  float scale;  // a constant of the primitive: oneDNN 2.6 runs runtime scales on a slower kernel
  int8_t in, out;
  bool transposed, bias, accumulate, scaled;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};

struct KeyHash {
  std::size_t operator()(const Key& k) const {
    const auto* p = reinterpret_cast<const unsigned char*>(&k);
    std::size_t h = 1469598103934665603ull;  // FNV-1a over the bytes (padding zeroed)
    for (std::size_t i = 0; i < sizeof(Key); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};

// A primitive with its memory objects: each call only swaps the data handles.
struct Entry {
  dnnl::matmul prim;
  dnnl::memory src, wei, dst, bias, scratch;
  dnnl::memory::desc wei_desc;
  std::unordered_map<int, dnnl::memory> args;  // the memories above, by argument
};

// Per thread: primitives are made on the thread that runs them, so no lock is taken per call.
struct Cache {
  std::unordered_map<Key, Entry, KeyHash> entries;
  std::vector<char> scratch;  // the primitives' scratchpad (user mode)
};
thread_local Cache t_cache;
constexpr std::size_t kMaxEntries = 256;  // cleared when full: a thrashing op still works

Entry make_entry(const Key& key) {
  const DType in = static_cast<DType>(key.in), out = static_cast<DType>(key.out);
  const dnnl::memory::desc src({key.rows, key.k}, dnnl_dtype(in), {key.lda, 1});
  const dnnl::memory::desc wei =
      key.ldb == 0
          ? dnnl::memory::desc({key.k, key.cols}, dnnl_dtype(in), dnnl::memory::format_tag::any)
          : plain_weight_desc(in, key.k, key.cols, key.ldb, key.transposed);
  const dnnl::memory::desc dst({key.rows, key.cols}, dnnl_dtype(out), {key.ldc, 1});
  const dnnl::memory::desc bias({1, key.cols}, dnnl_dtype(out), {key.cols, 1});

  Entry e;
  // With a scale the bias goes in after it, as a post-op (scale · A·B + bias): oneDNN's output
  // scale would multiply a bias argument too.
  const bool bias_post_op = key.bias && key.scaled;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.scaled) attr.set_output_scales(0, {key.scale});
  dnnl::post_ops po;
  if (key.accumulate) po.append_sum(1.0f);
  if (bias_post_op) po.append_binary(dnnl::algorithm::binary_add, bias);
  attr.set_post_ops(po);
  const bool bias_arg = key.bias && !bias_post_op;
  const dnnl::matmul::desc md =
      bias_arg ? dnnl::matmul::desc(src, wei, bias, dst) : dnnl::matmul::desc(src, wei, dst);
  const dnnl::matmul::primitive_desc pd(md, attr, dnnl_cpu_engine());
  dnnl::engine& eng = dnnl_cpu_engine();
  e.prim = dnnl::matmul(pd);
  e.wei_desc = pd.weights_desc();
  e.src = dnnl::memory(src, eng, nullptr);
  e.wei = dnnl::memory(e.wei_desc, eng, nullptr);
  e.dst = dnnl::memory(dst, eng, nullptr);
  e.scratch = dnnl::memory(pd.scratchpad_desc(), eng, nullptr);
  e.args = {{DNNL_ARG_SRC, e.src},
            {DNNL_ARG_WEIGHTS, e.wei},
            {DNNL_ARG_DST, e.dst},
            {DNNL_ARG_SCRATCHPAD, e.scratch}};
  if (key.bias) {
    e.bias = dnnl::memory(bias, eng, nullptr);
    e.args.emplace(bias_post_op
                       ? (DNNL_ARG_ATTR_MULTIPLE_POST_OP(key.accumulate ? 1 : 0) | DNNL_ARG_SRC_1)
                       : DNNL_ARG_BIAS,
                   e.bias);
  }
  return e;
}

// The weight's columns [n0, n1) as the address the primitive reads (plain or packed).
const void* weight_columns(const GemmWeight& w, const Entry& e, int64_t n0, int64_t n1) {
  const std::size_t elem = dtype_size(w.input_dtype());
  if (w.packed() == nullptr) {
    const int64_t off = w.transposed() ? n0 : n0 * w.ld();
    return static_cast<const char*>(w.data()) + static_cast<std::size_t>(off) * elem;
  }
  return w.packed()->layout().columns(n0, n1, e.wei_desc);
}

}  // namespace

void onednn_gemm_tile(const GemmWeight& w, const void* a, int64_t lda, int64_t rows, int64_t n0,
                      int64_t n1, const GemmOut& out) {
  OmpThreadsScope one(1);  // the op's workers are the parallelism; the caller's value comes back
  Cache& cache = t_cache;
  try {
    Key key;
    std::memset(&key, 0, sizeof key);  // the padding too: keys are compared and hashed as bytes
    key.rows = rows;
    key.cols = n1 - n0;
    key.k = w.k();
    key.lda = lda;
    key.ldb = w.packed() != nullptr ? 0 : w.ld();
    key.ldc = out.ldc;
    key.in = static_cast<int8_t>(w.input_dtype());
    key.out = static_cast<int8_t>(out.dtype);
    key.transposed = w.packed() == nullptr && w.transposed();
    key.bias = out.bias != nullptr;
    key.accumulate = out.accumulate;
    key.scaled = out.scale != 1.0;
    key.scale = key.scaled ? static_cast<float>(out.scale) : 0.0f;
    auto it = cache.entries.find(key);
    if (it == cache.entries.end()) {
      if (cache.entries.size() >= kMaxEntries) cache.entries.clear();
      it = cache.entries.emplace(key, make_entry(key)).first;
    }
    Entry& e = it->second;

    const void* wei = weight_columns(w, e, n0, n1);
    const std::size_t scratch = e.scratch.get_desc().get_size();
    if (cache.scratch.size() < scratch)
      resize_or_raise(cache.scratch, scratch, "gemm", "oneDNN's scratchpad");
    e.src.set_data_handle(const_cast<void*>(a));
    e.wei.set_data_handle(const_cast<void*>(wei));
    e.dst.set_data_handle(out.c);
    e.scratch.set_data_handle(cache.scratch.data());
    if (out.bias != nullptr) {
      const std::size_t off = static_cast<std::size_t>(n0) * dtype_size(out.dtype);
      e.bias.set_data_handle(const_cast<char*>(static_cast<const char*>(out.bias) + off));
    }
    e.prim.execute(dnnl_thread_stream(), e.args);
  } catch (const dnnl::error& e) {
    raise_dnnl(e, "a GEMM tile");
  }
}

std::size_t onednn_cached_primitives() {
  return t_cache.entries.size();
}

}  // namespace fluxcpp::kernels
