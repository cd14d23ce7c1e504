// The blocked GEMM driver vs one cblas_sgemm call on the same problem, one BLAS thread per rank
// (every rank runs it at once, as in a fused op).
#include <cblas.h>

#include <vector>

#include "bench.hpp"

#include <fmt/format.h>
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

void bench_gemm(Env& env) {
  struct Shape {
    int64_t m, n, k;
  };
  std::vector<Shape> shapes = {
      {256, 1024, 1024}, {1024, 1024, 1024}, {2048, 1024, 2048}, {1024, 4096, 1024}};
  if (env.settings().quick) shapes = {{256, 1024, 1024}, {1024, 1024, 1024}};
  const int saved = kernels::blas_set_threads(1);
  env.section("gemm: driver vs one cblas_sgemm (C = A*B^T, f32, 1 BLAS thread per rank)",
              {"M", "N", "K", "cblas", "driver", "ratio", "driver/256", "ratio", "GFLOP/s"});
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.n * s.k), c(s.m * s.n), c2(s.m * s.n);
    for (std::size_t i = 0; i < a.size(); ++i)
      a[i] = static_cast<float>((i * 7919) % 113) / 113.0f - 0.5f;
    for (std::size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<float>((i * 104729) % 97) / 97.0f - 0.5f;
    kernels::GemmWeight w;
    w.prepare(DType::kFloat32, b.data(), s.n, s.k, false);
    kernels::GemmOut out;
    out.c = c2.data();
    out.ldc = s.n;
    const std::vector<Stats> t = env.time_all({
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k,
                      b.data(), s.k, 0.0f, c.data(), s.n);
        },
        [&] { kernels::gemm_rows(w, a.data(), s.k, s.m, out, 0); },
        [&] { kernels::gemm_rows(w, a.data(), s.k, s.m, out, 256); },
    });
    const Stats ref = t[0], one = t[1], blocked = t[2];
    const double gflop = 2.0 * s.m * s.n * s.k / 1e9;
    env.row({std::to_string(s.m), std::to_string(s.n), std::to_string(s.k), fmt_ms(ref.median_ms),
             fmt_ms(one.median_ms), fmt::format("{:.3f}", ref.median_ms / one.median_ms),
             fmt_ms(blocked.median_ms), fmt::format("{:.3f}", ref.median_ms / blocked.median_ms),
             fmt::format("{:.1f}", gflop / (ref.median_ms * 1e-3))});
    env.json({{"op", jstr("gemm")},
              {"dtype", jstr("f32")},
              {"world", jnum(env.world())},
              {"m", jnum(s.m)},
              {"n", jnum(s.n)},
              {"k", jnum(s.k)},
              {"t_fused_ms", jnum(one.median_ms)},
              {"t_unfused_ms", jnum(ref.median_ms)},
              {"t_gemm_ms", jnum(one.median_ms)},
              {"t_comm_ms", jnum(0)},
              {"t_blocked256_ms", jnum(blocked.median_ms)},
              {"speedup", jnum(ref.median_ms / one.median_ms)},
              {"overlap_eff", "null"}});
  }
  kernels::blas_set_threads(saved);
}

}  // namespace fluxcpp::bench
