// The GEMM engine on one rank's problem, C[M,N] = A[M,K] * W[N,K]^T with f32 output, one thread
// per rank (every rank runs it at once, as in a fused op): oneDNN in one call on the weight as it
// lies, oneDNN in 8 row tiles (as the fused ops' drivers split the rows), oneDNN on a
// PackedWeight, and OpenBLAS in one call (bf16 widened to f32).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "bench.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"

namespace fluxcpp::bench {

namespace {

using Bytes = std::vector<unsigned char>;

constexpr int64_t kTiles = 8;          // row tiles of the tiled variant
constexpr int64_t kMinTiledRows = 64;  // below this, tiles of < 8 rows: not measured

std::vector<GemmShape> gemm_shapes(const Settings& s) {
  if (!s.shapes.empty()) return s.shapes;
  if (s.quick) return {{256, 1024, 1024}, {512, 1536, 1024}, {8, 1536, 1024}};
  // Harness shapes, then layer shapes: prefill (512 rows) and decode (8, 32 rows).
  return {{256, 1024, 1024}, {1024, 1024, 1024}, {2048, 1024, 2048}, {1024, 4096, 1024},
          {512, 1536, 1024}, {512, 2816, 1024},  {8, 1536, 1024},    {32, 2816, 1024}};
}

// Elements of `got` farther than tol from `ref`, summed over ranks.
long count_wrong(const std::vector<float>& got, const std::vector<float>& ref, double tol) {
  long bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) bad += std::fabs(got[i] - ref[i]) > tol;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return bad;
}

}  // namespace

void bench_gemm(Env& parent) {
  // GEMM times on one host are steady: fewer samples keep the big shapes' runtime sane.
  Settings st = parent.settings();
  st.samples = std::min(st.samples, 9);
  st.warmup = std::min(st.warmup, 2);
  Env env = parent.with_settings(st);
  const int saved = kernels::blas_set_threads(1);
  // tiles: 8 row tiles of ceil(M/8) rows (n/a when M < 64); packed: oneDNN on a PackedWeight;
  // ratios are time ratios; #bad: elements of tiles/packed/OpenBLAS off the one call by > 1e-5*K.
  const int samples = st.quick ? std::max(5, st.samples / 3) : st.samples;
  env.section(
      fmt::format("gemm: the GEMM engine, C = A*W^T (W [N,K]), f32 out, 1 thread per rank, all "
                  "ranks at once; tiles = 8 row tiles, packed = PackedWeight, ratios of times; {} "
                  "samples",
                  samples),
      {"M", "N", "K", "dtype", "oneDNN", "GFLOP/s", "tiles", "tiles/one", "packed", "packed/one",
       "OpenBLAS", "oneDNN/BLAS", "#bad"});
  for (const DType d : env.settings().dtypes)
    for (const GemmShape& s : gemm_shapes(env.settings())) {
      const Bytes a = random_values(d, s.m * s.k, 7 + env.rank());
      const Bytes b = random_values(d, s.n * s.k, 11 + env.rank());
      std::vector<float> c_one(s.m * s.n), c_tiles(s.m * s.n), c_packed(s.m * s.n),
          c_blas(s.m * s.n);
      kernels::GemmWeight w_dnn, w_packed, w_blas;
      w_dnn.prepare(d, b.data(), s.n, s.k, false, 0, kernels::GemmEngine::kOneDnn);
      w_blas.prepare(d, b.data(), s.n, s.k, false, 0, kernels::GemmEngine::kOpenBlas);
      const kernels::PackedWeight packed(d, b.data(), s.n, s.k, false);
      w_packed.prepare(packed);
      auto run = [&](const kernels::GemmWeight& w, std::vector<float>& c, int64_t block_rows) {
        kernels::GemmOut out;
        out.c = c.data();
        out.ldc = s.n;
        out.dtype = DType::kFloat32;
        kernels::gemm_rows(w, a.data(), s.k, s.m, out, block_rows);
      };
      const bool tiled = s.m >= kMinTiledRows;
      const int64_t block = (s.m + kTiles - 1) / kTiles;
      std::vector<std::function<void()>> fns = {
          [&] { run(w_dnn, c_one, 0); },
          [&] { run(w_packed, c_packed, 0); },
          [&] { run(w_blas, c_blas, 0); },
      };
      if (tiled) fns.push_back([&] { run(w_dnn, c_tiles, block); });
      const std::vector<Stats> t = env.time_all(fns);
      const double one = t[0].median_ms, pk = t[1].median_ms, blas = t[2].median_ms;
      const double tiles = tiled ? t[3].median_ms : NAN;
      // Check: every variant once more, against the one call.
      for (const auto& fn : fns) fn();
      const double tol = 1e-5 * s.k;
      const long bad = (tiled ? count_wrong(c_tiles, c_one, tol) : 0) +
                       count_wrong(c_packed, c_one, tol) + count_wrong(c_blas, c_one, tol);
      const double gflop = 2.0 * s.m * s.n * s.k / 1e9;
      env.row({std::to_string(s.m), std::to_string(s.n), std::to_string(s.k), dtype_name(d),
               fmt_ms(one), fmt::format("{:.1f}", gflop / (one * 1e-3)),
               tiled ? fmt_ms(tiles) : "n/a", tiled ? fmt::format("{:.2f}", tiles / one) : "n/a",
               fmt_ms(pk), fmt::format("{:.2f}", pk / one), fmt_ms(blas),
               fmt::format("{:.2f}", one / blas), std::to_string(bad)});
      env.json({{"op", jstr("gemm")},
                {"dtype", jstr(dtype_name(d))},
                {"out_dtype", jstr("f32")},
                {"world", jnum(env.world())},
                {"m", jnum(static_cast<double>(s.m))},
                {"n", jnum(static_cast<double>(s.n))},
                {"k", jnum(static_cast<double>(s.k))},
                {"t_onednn_ms", jnum(one)},
                {"t_tiles_ms", jnum(tiles)},  // null when not measured (M < 64)
                {"t_packed_ms", jnum(pk)},
                {"t_openblas_ms", jnum(blas)},
                {"gflops_onednn", jnum(gflop / (one * 1e-3))},
                {"wrong", jnum(static_cast<double>(bad))}});
    }
  kernels::blas_set_threads(saved);
}

}  // namespace fluxcpp::bench
