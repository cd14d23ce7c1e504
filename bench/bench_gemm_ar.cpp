// GemmAr vs the unfused path a user would write on the same engine: one oneDNN GEMM call
// (kernels::gemm_rows, as gemm_rs's unfused path) of the rank's partial product in f32, then
// MPI_Allreduce (MPI_SUM) in f32; plus the GEMM alone and MPI_Allreduce alone. GemmAr has no
// gemm-only / comm-only paths: those columns show "–" (null in the JSON), and the table's move
// column is MPI_Allreduce of the f32 partial.
//
// Shapes: the row-parallel layers of a Llama-style model at TP = W (output [m, n] on every rank):
// MLP-down (n, k) = (hidden, ffn/W) with ffn = 2.75·hidden, and, with --full, attention-out
// (hidden, hidden/W); decode m = 1, 8, 32 and prefill m = 512, hidden 1024 and 4096 (hidden 4096
// prefill only with --full). k is rounded up when W does not divide it.
//
// Dtypes: f32 -> f32, and bf16 -> bf16 (inference). The bf16 unfused path computes the GEMM to
// f32, reduces in f32 (MPI has no bf16 type nor bf16 MPI_SUM) and rounds once to bf16, which is
// what GemmAr does internally (f32 partials, one rounding after the sum); its MPI_Allreduce moves
// twice the bytes of a bf16 output. In both paths the bias joins world rank 0's GEMM (a oneDNN
// post-op: no pass of its own); the rounding to bf16 is part of the unfused time.
//
// Decode shapes (m <= kDecodeRows) also run with the weight packed once (PackedWeight): on that
// row the unfused GEMM and the GEMM column compute on the same packed weight, so that the speedup
// is the fusion's, not the packing's.
//
// #bad: the inputs, weights and bias are small integers (|x|, |w| <= 2), so every partial sum is
// an integer far below 2^24, exact in f32 in any order; the fused output must equal the unfused
// one bit for bit (bf16: both round the same exact f32 sum).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/gemm_ar.hpp"
#include "fluxcpp/packed_weight.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

namespace {

using Bytes = std::vector<unsigned char>;

// `count` integers in [-2, 2] of dtype t, deterministic in seed.
Bytes small_ints(DType t, std::size_t count, uint64_t seed) {
  Bytes v(count * dtype_size(t));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < count; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float f = static_cast<float>(static_cast<int>((x >> 32) % 5) - 2);
    if (t == DType::kFloat32)
      reinterpret_cast<float*>(v.data())[i] = f;
    else
      reinterpret_cast<uint16_t*>(v.data())[i] = kernels::f32_to_bf16(f);
  }
  return v;
}

struct Shape {
  int64_t m, n, k;  // m: rows, the same on every rank; k: this rank's slice of the reduction
  DType dtype;
};

std::vector<Shape> shapes(const Env& env) {
  const Settings& st = env.settings();
  const int64_t W = env.world();
  auto per_rank = [W](int64_t k) { return (k + W - 1) / W; };
  std::vector<Shape> out;
  if (!st.shapes.empty()) {  // --shape
    for (DType d : st.dtypes)
      for (const GemmShape& g : st.shapes) out.push_back({g.m, g.n, g.k, d});
    return out;
  }
  std::vector<GemmShape> list;
  bool bf16_first_only = false;
  if (st.link) {
    // Hosts joined by a shaped link: the shapes whose all-reduce is a good part of the GEMM at
    // 10 Gbit/s — attention-out of hidden 1024 at decode (32 rows: latency) and prefill, then
    // gemm_rs's link shape (the link probe's flops).
    list = {{512, 1024, per_rank(1024)}, {32, 1024, per_rank(1024)}};
    if (!st.quick) list.push_back({2048, 2048, 256});
    bf16_first_only = true;  // bf16 for the prefill shape only, and not with --quick
  } else if (st.quick) {
    const int64_t k = per_rank(2816);
    list = {{1, 1024, k}, {32, 1024, k}, {512, 1024, k}, {8, 4096, per_rank(11264)}};
  } else {
    for (int64_t hidden : {1024, 4096}) {
      std::vector<int64_t> ks = {per_rank(hidden * 11 / 4)};  // MLP-down: ffn / W
      if (st.full) ks.push_back(per_rank(hidden));            // attention-out: hidden / W
      for (int64_t k : ks)
        for (int64_t m : {1, 8, 32, 512}) {
          if (m == 512 && hidden == 4096 && !st.full) continue;  // 8.6 to 24 GFLOP per call
          list.push_back({m, hidden, k});
        }
    }
  }
  for (DType d : st.dtypes)
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (bf16_first_only && d != DType::kFloat32 && (st.quick || i != 0)) continue;
      out.push_back({list[i].m, list[i].n, list[i].k, d});
    }
  return out;
}

}  // namespace

void bench_gemm_ar(Env& env) {
  const int W = env.world();
  fused_header(env,
               fmt::format("gemm_ar: GEMM + AllReduce, {} ranks on {} host(s); M rows on every "
                           "rank, K per rank; f32 -> f32, bf16 -> bf16; unfused = one GEMM to "
                           "f32 + MPI_Allreduce f32 (+ rounding); no gemm-only/comm-only paths",
                           W, env.ctx().num_hosts()),
               "allreduce");
  const Stats none{NAN, NAN, NAN};
  for (const Shape& s : shapes(env)) {
    const DType in_t = s.dtype, out_t = s.dtype;
    const bool round = out_t != DType::kFloat32;
    const int64_t count = s.m * s.n;
    GemmArOptions o;
    o.max_m = s.m;
    o.n = s.n;
    o.k = s.k;
    o.input_dtype = in_t;
    o.output_dtype = out_t;
    GemmAr op(env.ctx(), o);
    const Bytes input = small_ints(in_t, s.m * s.k, 23 + env.rank());
    const Bytes weight = small_ints(in_t, s.n * s.k, 57 + env.rank());
    const Bytes bias = small_ints(out_t, s.n, 3);  // the same on every rank
    // The unfused path's bias in f32 (kept so by a user: converted once, not per call).
    std::vector<float> bias32(s.n);
    for (int64_t j = 0; j < s.n; ++j)
      bias32[j] = static_cast<float>(value_at(out_t, bias.data(), j));
    Bytes out(count * dtype_size(out_t)), ref(count * dtype_size(out_t));
    std::vector<float> partial(count), reduced(round ? count : 0);
    // f32: MPI_Allreduce writes the output itself; bf16: an f32 buffer, then one rounding pass.
    float* sum = round ? reduced.data() : reinterpret_cast<float*>(ref.data());
    std::unique_ptr<PackedWeight> packed;
    if (s.m <= kDecodeRows)
      packed = std::make_unique<PackedWeight>(env.ctx(), in_t, weight.data(), s.n, s.k);
    for (int variant = 0; variant < (packed ? 2 : 1); ++variant) {
      const bool use_packed = variant == 1;
      kernels::GemmWeight w;
      kernels::GemmOut go;
      go.c = partial.data();
      go.ldc = s.n;
      go.dtype = DType::kFloat32;
      go.bias = env.rank() == 0 ? bias32.data() : nullptr;  // added once, as the op does
      auto gemm = [&] {
        if (use_packed)
          w.prepare(packed->impl());
        else
          w.prepare(in_t, weight.data(), s.n, s.k, false);
        kernels::gemm_rows(w, input.data(), s.k, s.m, go);
      };
      auto allreduce = [&] {
        MPI_Allreduce(partial.data(), sum, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      };
      auto unfused = [&] {
        gemm();
        allreduce();
        if (round)
          kernels::f32_to_bf16(reduced.data(), reinterpret_cast<uint16_t*>(ref.data()), count);
      };
      auto fused = [&] {
        if (use_packed)
          op.forward(input.data(), s.m, *packed, bias.data(), out.data());
        else
          op.forward(input.data(), s.m, weight.data(), bias.data(), out.data());
      };
      const std::vector<Stats> t = env.time_all({fused, unfused, gemm, allreduce});
      fused();
      unfused();
      long bad = 0;
      for (int64_t i = 0; i < count; ++i)
        bad += value_at(out_t, out.data(), i) != value_at(out_t, ref.data(), i);
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      fused_row(env, {"gemm_ar", s.m, s.n, s.k, in_t, out_t, false, use_packed},
                {t[0], t[1], none, none, t[2], t[3]}, bad);
    }
  }
}

}  // namespace fluxcpp::bench
