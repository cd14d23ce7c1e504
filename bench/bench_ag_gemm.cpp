// AGKernel vs the unfused path (MPI_Allgather + one GEMM over the gathered rows), plus its
// gemm-only and comm-only paths, from compute-bound to communication-bound shapes.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/ag_gemm.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

namespace {

struct Shape {
  int64_t m, n, k;  // m: total rows (all ranks); n: this rank's columns
  DType dtype;
};

std::vector<unsigned char> random_bytes(DType t, std::size_t count, uint64_t seed) {
  std::vector<unsigned char> v(count * dtype_size(t));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < count; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    float f = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    if (t == DType::kFloat32)
      reinterpret_cast<float*>(v.data())[i] = f;
    else if (t == DType::kFloat64)
      reinterpret_cast<double*>(v.data())[i] = f;
    else
      reinterpret_cast<uint16_t*>(v.data())[i] = kernels::f32_to_bf16(f);
  }
  return v;
}

double as_double(DType t, const unsigned char* p, std::size_t i) {
  if (t == DType::kFloat32) return reinterpret_cast<const float*>(p)[i];
  if (t == DType::kFloat64) return reinterpret_cast<const double*>(p)[i];
  return kernels::bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
}

}  // namespace

void bench_ag_gemm(Env& env) {
  const int W = env.world();
  std::vector<Shape> shapes;
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t m : {256, 1024, 4096})
      for (int64_t n : {64, 256, 1024})
        for (int64_t k : {1024, 4096}) {
          if (env.settings().quick && (m != 1024 || k != 1024)) continue;
          // Keep the suite's runtime sane on small machines: skip the heaviest corner.
          if (!env.settings().full && 2.0 * m * n * k > 4.5e9) continue;
          shapes.push_back({m, n, k, d});
        }
  }
  env.section(fmt::format("ag_gemm: AllGather + GEMM, {} ranks on {} host(s); M total rows, N "
                          "columns per rank",
                          W, env.ctx().num_nodes()),
              {"M", "N", "K", "dtype", "fused", "unfused", "gemm-only", "comm-only", "MPI_AG",
               "AG/GEMM", "speedup", "overlap", "limit", "#bad"});
  for (const Shape& s : shapes) {
    const int64_t rows = s.m / W;
    const DType out_t = DType::kFloat32;  // bf16 inputs produce f32, as a Linear layer in training
    const std::size_t esz = dtype_size(s.dtype);
    AgGemmOptions o;
    o.max_m = s.m;
    o.n = s.n;
    o.k = s.k;
    o.input_dtype = s.dtype;
    o.output_dtype = out_t;
    AgGemm op(env.ctx(), o);
    auto input = random_bytes(s.dtype, rows * s.k, 17 + env.rank());
    auto weight = random_bytes(s.dtype, s.n * s.k, 91 + env.rank());
    auto bias = random_bytes(out_t, s.n, 5);
    std::vector<unsigned char> gathered(s.m * s.k * esz), out(s.m * s.n * 4), ref(s.m * s.n * 4),
        scratch(s.m * s.k * esz);
    kernels::GemmWeight w;
    kernels::GemmOut go;
    go.c = ref.data();
    go.ldc = s.n;
    go.dtype = out_t;
    go.bias = bias.data();
    const int blk = static_cast<int>(rows * s.k * esz);
    auto unfused = [&] {
      MPI_Allgather(input.data(), blk, MPI_BYTE, gathered.data(), blk, MPI_BYTE, MPI_COMM_WORLD);
      w.prepare(s.dtype, weight.data(), s.n, s.k, false);
      kernels::gemm_rows(w, gathered.data(), s.k, s.m, go);
    };
    const std::vector<Stats> t = env.time_all({
        [&] { op.forward(input.data(), s.m, weight.data(), bias.data(), out.data(), nullptr); },
        unfused,
        [&] { op.forward_gemm_only(input.data(), s.m, weight.data(), bias.data(), out.data()); },
        [&] { op.forward_comm_only(input.data(), s.m, scratch.data()); },
        [&] {
          MPI_Allgather(input.data(), blk, MPI_BYTE, gathered.data(), blk, MPI_BYTE,
                        MPI_COMM_WORLD);
        },
    });
    // Check the fused result against the unfused one.
    op.forward(input.data(), s.m, weight.data(), bias.data(), out.data(), nullptr);
    unfused();
    long bad = 0;
    const double tol = 1e-5 * s.k;
    for (int64_t i = 0; i < s.m * s.n; ++i)
      bad += std::fabs(as_double(out_t, out.data(), i) - as_double(out_t, ref.data(), i)) > tol;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);

    const double tf = t[0].median_ms, tu = t[1].median_ms, tg = t[2].median_ms, tc = t[3].median_ms,
                 tag = t[4].median_ms;
    const double speedup = tu / tf, eff = (tg + tc - tf) / tc, limit = tf / std::max(tg, tc);
    env.row({std::to_string(s.m), std::to_string(s.n), std::to_string(s.k), dtype_name(s.dtype),
             fmt_ms(tf), fmt_ms(tu), fmt_ms(tg), fmt_ms(tc), fmt_ms(tag),
             fmt::format("{:.2f}", tag / tg), fmt::format("{:.2f}x", speedup),
             fmt::format("{:.2f}", eff), fmt::format("{:.2f}", limit), std::to_string(bad)});
    env.json({{"op", jstr("ag_gemm")},
              {"dtype", jstr(dtype_name(s.dtype))},
              {"out_dtype", jstr(dtype_name(out_t))},
              {"world", jnum(W)},
              {"hosts", jnum(env.ctx().num_nodes())},
              {"m", jnum(s.m)},
              {"n", jnum(s.n)},
              {"k", jnum(s.k)},
              {"t_fused_ms", jnum(tf)},
              {"t_unfused_ms", jnum(tu)},
              {"t_gemm_ms", jnum(tg)},
              {"t_comm_ms", jnum(tc)},
              {"t_mpi_allgather_ms", jnum(tag)},
              {"speedup", jnum(speedup)},
              {"overlap_eff", jnum(eff)},
              {"limit_ratio", jnum(limit)},
              {"wrong", jnum(bad)}});
  }
}

}  // namespace fluxcpp::bench
