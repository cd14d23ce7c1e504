// grouped_gemm vs a loop of cblas_sgemm over the groups, with OpenBLAS given the same number of
// threads as the op's compute workers. T tokens × topk rows spread over E groups (balanced, or
// skewed: one group takes half the rows), n = k = hidden, a per-group scale. bf16: the loop first
// widens the input and the weights of the non-empty groups (as the op does every call) and
// rounds the output; the "f32 data" column is the same loop on data widened beforehand (the pure
// GEMM, a lower bound no bf16 path can beat).
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench.hpp"
#include "comm/context_impl.hpp"
#include "fluxcpp/grouped_gemm.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {
namespace {

struct Shape {
  int64_t tokens, topk, groups, hidden;
};

// Rows per group: balanced (m/G, the remainder to the first groups) or skewed (group G/2 takes
// half, the rest share the other half).
std::vector<int64_t> make_splits(int64_t m, int64_t G, bool skewed) {
  std::vector<int64_t> s(static_cast<std::size_t>(G), 0);
  const int64_t big = skewed ? m / 2 : 0;
  const int64_t others = skewed ? G - 1 : G, rest = m - big;
  for (int64_t g = 0, i = 0; g < G; ++g) {
    if (skewed && g == G / 2) continue;
    s[g] = rest / others + (i++ < rest % others ? 1 : 0);
  }
  if (skewed) s[G / 2] = big;
  return s;
}

}  // namespace

void bench_grouped_gemm(Env& env) {
  const bool quick = env.settings().quick, full = env.settings().full;
  std::vector<Shape> shapes;
  if (full) {
    for (int64_t hidden : {1024, 4096})
      for (int64_t tokens : {512, 4096})
        for (int64_t topk : {2, 6})
          for (int64_t groups : {8, 64})
            // f32 weights above 1 GiB per rank do not fit the machines this runs on.
            if (groups * hidden * hidden * 4 <= (int64_t{1} << 30))
              shapes.push_back({tokens, topk, groups, hidden});
  } else {
    shapes = {{512, 2, 8, 1024}, {512, 6, 64, 1024}};
    if (!quick) shapes.push_back({4096, 2, 8, 1024});
  }
  const int threads = env.ctx().impl()->config().compute_threads;
  env.section(
      fmt::format("grouped_gemm: local, {} compute thread(s) per rank vs a cblas_sgemm loop on {} "
                  "OpenBLAS thread(s); every rank runs its own; n = k = hidden",
                  threads, threads),
      {"tokens", "topk", "E", "hidden", "dtype", "splits", "max rows", "grouped", "cblas loop",
       "ratio", "f32 data", "ratio", "GFLOP/s", "#bad"});
  for (DType dt : {DType::kFloat32, DType::kBFloat16})
    for (const Shape& sh : shapes)
      for (bool skewed : {false, true}) {
        const int64_t m = sh.tokens * sh.topk, G = sh.groups, n = sh.hidden, k = sh.hidden;
        const std::vector<int64_t> splits = make_splits(m, G, skewed);
        GroupedGemmOptions o;
        o.num_groups = G;
        o.max_m = m;
        o.n = n;
        o.k = k;
        o.input_dtype = dt;
        o.output_dtype = dt;
        GroupedGemm op(env.ctx(), o);
        const auto input = random_values(dt, static_cast<std::size_t>(m * k), 5 + env.rank());
        const auto weight = random_values(dt, static_cast<std::size_t>(G * n * k), 9 + env.rank());
        std::vector<float> scale(static_cast<std::size_t>(G));
        for (int64_t g = 0; g < G; ++g) scale[g] = 0.5f + static_cast<float>(g % 5) / 4.0f;
        const std::size_t osz = dtype_size(dt);
        std::vector<unsigned char> out(static_cast<std::size_t>(m * n) * osz),
            ref(static_cast<std::size_t>(m * n) * osz);
        // f32 views (bf16 widened) for the loop; the bf16 loop widens into in32/w32 itself.
        std::vector<float> in32(static_cast<std::size_t>(m * k)),
            w32(static_cast<std::size_t>(G * n * k)), c32(static_cast<std::size_t>(m * n));
        const auto* in16 = reinterpret_cast<const uint16_t*>(input.data());
        const auto* w16 = reinterpret_cast<const uint16_t*>(weight.data());
        auto widen = [&] {
          kernels::bf16_to_f32(in16, in32.data(), m * k);
          for (int64_t g = 0; g < G; ++g)
            if (splits[g] > 0) kernels::bf16_to_f32(w16 + g * n * k, w32.data() + g * n * k, n * k);
        };
        if (dt == DType::kBFloat16) widen();
        const float* a =
            dt == DType::kFloat32 ? reinterpret_cast<const float*>(input.data()) : in32.data();
        const float* b =
            dt == DType::kFloat32 ? reinterpret_cast<const float*>(weight.data()) : w32.data();
        float* c = dt == DType::kFloat32 ? reinterpret_cast<float*>(ref.data()) : c32.data();
        auto sgemm_loop = [&] {
          int64_t row = 0;
          for (int64_t g = 0; g < G; ++g) {
            if (splits[g] > 0)
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(splits[g]),
                          static_cast<blasint>(n), static_cast<blasint>(k), scale[g], a + row * k,
                          static_cast<blasint>(k), b + g * n * k, static_cast<blasint>(k), 0.0f,
                          c + row * n, static_cast<blasint>(n));
            row += splits[g];
          }
        };
        auto loop = [&] {
          if (dt == DType::kBFloat16) widen();
          sgemm_loop();
          if (dt == DType::kBFloat16)
            kernels::f32_to_bf16(c32.data(), reinterpret_cast<uint16_t*>(ref.data()), m * n);
        };
        auto ours = [&] {
          op.forward(input.data(), splits.data(), weight.data(), scale.data(), out.data());
        };
        // OpenBLAS gets the op's thread count for the loop; the op runs it on one thread inside
        // its call and restores this setting afterwards.
        const int saved = kernels::blas_set_threads(std::max(1, threads));
        std::vector<std::function<void()>> variants = {ours, loop};
        if (dt == DType::kBFloat16) variants.push_back(sgemm_loop);
        const std::vector<Stats> t = env.time_all(variants);
        ours();
        loop();
        kernels::blas_set_threads(saved);
        long bad = 0;
        const double rel = dt == DType::kBFloat16 ? 1.0 / 64 : 1e-4;
        for (int64_t i = 0; i < m * n; ++i) {
          const double x = value_at(dt, out.data(), i), y = value_at(dt, ref.data(), i);
          bad += !(std::fabs(x - y) <= rel * (1.0 + std::fabs(y)));
        }
        MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        const double tg = t[0].median_ms, tl = t[1].median_ms;
        const double tf = dt == DType::kBFloat16 ? t[2].median_ms : tl;
        const double gflop = 2.0 * m * n * k / 1e9;
        const int64_t max_rows = *std::max_element(splits.begin(), splits.end());
        env.row({std::to_string(sh.tokens), std::to_string(sh.topk), std::to_string(G),
                 std::to_string(sh.hidden), dtype_name(dt), skewed ? "skewed" : "balanced",
                 std::to_string(max_rows), fmt_ms(tg), fmt_ms(tl), fmt::format("{:.2f}", tl / tg),
                 dt == DType::kBFloat16 ? fmt_ms(tf) : "-",
                 dt == DType::kBFloat16 ? fmt::format("{:.2f}", tf / tg) : "-",
                 fmt::format("{:.1f}", gflop / (tg * 1e-3)), std::to_string(bad)});
        env.json({{"op", jstr("grouped_gemm")},
                  {"dtype", jstr(dtype_name(dt))},
                  {"out_dtype", jstr(dtype_name(dt))},
                  {"world", jnum(env.world())},
                  {"compute_threads", jnum(threads)},
                  {"tokens", jnum(static_cast<double>(sh.tokens))},
                  {"topk", jnum(static_cast<double>(sh.topk))},
                  {"groups", jnum(static_cast<double>(G))},
                  {"m", jnum(static_cast<double>(m))},
                  {"n", jnum(static_cast<double>(n))},
                  {"k", jnum(static_cast<double>(k))},
                  {"splits", jstr(skewed ? "skewed" : "balanced")},
                  {"t_fused_ms", jnum(tg)},
                  {"t_unfused_ms", jnum(tl)},
                  {"t_gemm_f32_data_ms", jnum(tf)},
                  {"speedup", jnum(tl / tg)},
                  {"overlap_eff", "null"},
                  {"wrong", jnum(static_cast<double>(bad))}});
      }
}

}  // namespace fluxcpp::bench
