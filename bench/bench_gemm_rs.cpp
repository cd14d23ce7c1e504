// GemmRS vs the unfused path (one GEMM + MPI_Reduce_scatter_block), plus its gemm-only and
// comm-only paths, from compute-bound to communication-bound shapes.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/gemm_rs.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

namespace {

std::vector<unsigned char> random_values(DType t, std::size_t count, uint64_t seed) {
  std::vector<unsigned char> v(count * dtype_size(t));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < count; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    float f = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    if (t == DType::kFloat32)
      reinterpret_cast<float*>(v.data())[i] = f;
    else
      reinterpret_cast<uint16_t*>(v.data())[i] = kernels::f32_to_bf16(f);
  }
  return v;
}

}  // namespace

void bench_gemm_rs(Env& env) {
  const int W = env.world();
  struct Shape {
    int64_t m, n, k;  // m: total rows; k: this rank's slice of the reduction
    DType dtype;
  };
  std::vector<Shape> shapes;
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (int64_t m : {256, 1024, 4096})
      for (int64_t n : {256, 1024, 4096})
        for (int64_t k : {64, 256, 1024}) {
          if (env.settings().quick && (m != 1024 || k != 256)) continue;
          if (!env.settings().full && 2.0 * m * n * k > 4.5e9) continue;
          shapes.push_back({m, n, k, d});
        }
  env.section(fmt::format("gemm_rs: GEMM + ReduceScatter, {} ranks on {} host(s); M total rows, "
                          "K per rank, f32 output",
                          W, env.ctx().num_nodes()),
              {"M", "N", "K", "dtype", "fused", "unfused", "gemm-only", "comm-only", "MPI_RS",
               "RS/GEMM", "speedup", "overlap", "limit", "#bad"});
  for (const Shape& s : shapes) {
    const int64_t rows = s.m / W;
    GemmRsOptions o;
    o.max_m = s.m;
    o.n = s.n;
    o.k = s.k;
    o.input_dtype = s.dtype;
    o.output_dtype = DType::kFloat32;
    GemmRs op(env.ctx(), o);
    auto input = random_values(s.dtype, s.m * s.k, 23 + env.rank());
    auto weight = random_values(s.dtype, s.n * s.k, 57 + env.rank());
    auto bias = random_values(DType::kFloat32, s.n, 3);
    std::vector<float> out(rows * s.n), ref(rows * s.n), partial(s.m * s.n);
    kernels::GemmWeight w;
    kernels::GemmOut go;
    go.c = partial.data();
    go.ldc = s.n;
    auto unfused = [&] {
      w.prepare(s.dtype, weight.data(), s.n, s.k, false);
      kernels::gemm_rows(w, input.data(), s.k, s.m, go);
      MPI_Reduce_scatter_block(partial.data(), ref.data(), static_cast<int>(rows * s.n), MPI_FLOAT,
                               MPI_SUM, MPI_COMM_WORLD);
      const float* b = reinterpret_cast<const float*>(bias.data());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < s.n; ++j) ref[i * s.n + j] += b[j];
    };
    const std::vector<Stats> t = env.time_all({
        [&] { op.forward(input.data(), s.m, weight.data(), bias.data(), out.data()); },
        unfused,
        [&] { op.forward_gemm_only(input.data(), s.m, weight.data()); },
        [&] { op.forward_comm_only(s.m, nullptr, out.data()); },
        [&] {
          MPI_Reduce_scatter_block(partial.data(), ref.data(), static_cast<int>(rows * s.n),
                                   MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        },
    });
    op.forward(input.data(), s.m, weight.data(), bias.data(), out.data());
    unfused();
    long bad = 0;
    const double tol = 1e-5 * s.k * W;
    for (int64_t i = 0; i < rows * s.n; ++i) bad += std::fabs(out[i] - ref[i]) > tol;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const double tf = t[0].median_ms, tu = t[1].median_ms, tg = t[2].median_ms, tc = t[3].median_ms,
                 trs = t[4].median_ms;
    const double speedup = tu / tf, eff = (tg + tc - tf) / tc, limit = tf / std::max(tg, tc);
    env.row({std::to_string(s.m), std::to_string(s.n), std::to_string(s.k), dtype_name(s.dtype),
             fmt_ms(tf), fmt_ms(tu), fmt_ms(tg), fmt_ms(tc), fmt_ms(trs),
             fmt::format("{:.2f}", trs / tg), fmt::format("{:.2f}x", speedup),
             fmt::format("{:.2f}", eff), fmt::format("{:.2f}", limit), std::to_string(bad)});
    env.json({{"op", jstr("gemm_rs")},
              {"dtype", jstr(dtype_name(s.dtype))},
              {"out_dtype", jstr("f32")},
              {"world", jnum(W)},
              {"hosts", jnum(env.ctx().num_nodes())},
              {"m", jnum(s.m)},
              {"n", jnum(s.n)},
              {"k", jnum(s.k)},
              {"t_fused_ms", jnum(tf)},
              {"t_unfused_ms", jnum(tu)},
              {"t_gemm_ms", jnum(tg)},
              {"t_comm_ms", jnum(tc)},
              {"t_mpi_reduce_scatter_ms", jnum(trs)},
              {"speedup", jnum(speedup)},
              {"overlap_eff", jnum(eff)},
              {"limit_ratio", jnum(limit)},
              {"wrong", jnum(bad)}});
  }
}

}  // namespace fluxcpp::bench
