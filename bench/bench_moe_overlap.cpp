// Whether dispatch + grouped GEMM gains from starting each expert's GEMM as soon as its rows have
// all arrived (moe_dispatch's internal forward_by_expert, own rows first) instead of after the
// whole dispatch. f32, uniform top-k routing, each local expert one kernels::gemm_rows call on
// the library's GEMM engine (kAuto: oneDNN for f32), C = A·Wᵀ with A [rows, hidden], W [ffn,
// hidden]. Columns as the fused tables: hidden = (GEMM + dispatch - by_expert) /
// min(GEMM, dispatch), speedup = sequence / by_expert. #bad: elements of the sequence's and the
// by-expert run's outputs that disagree with a cblas_sgemm reference on the same received rows.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench.hpp"
#include "kernels/gemm.hpp"
#include "ops/moe_dispatch.hpp"

namespace fluxcpp::bench {

void bench_moe_overlap(Env& env) {
  const int W = env.world(), r = env.rank();
  struct Shape {
    int64_t T, hidden, E, K, ffn;
  };
  std::vector<Shape> shapes = {{512, 1024, 8, 2, 512}, {512, 1024, 8, 2, 2048}};
  if (!env.settings().link && env.settings().quick) shapes.resize(1);
  env.section(fmt::format("moe_overlap: dispatch + grouped GEMM, whole vs expert by expert, {} "
                          "ranks on {} host(s), f32, one oneDNN gemm_rows per local expert",
                          W, env.ctx().num_hosts()),
              {"T", "hidden", "E", "topk", "ffn", "dispatch", "GEMM", "sequence", "by expert",
               "hidden", "speedup", "#bad"});
  for (const Shape& s : shapes) {
    if (s.E % W != 0) continue;
    const int64_t L = s.E / W;
    std::vector<int32_t> ids(static_cast<std::size_t>(s.T * s.K));
    uint64_t x = 0x9E3779B97F4A7C15ull * (r + 1);
    for (auto& e : ids) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      e = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(s.E));
    }
    const auto op = ops::make_op<detail::MoeDispatchImpl>(
        env.ctx().impl(), MoeDispatchOptions{s.T, s.hidden, s.K, s.E, 0, DType::kFloat32});
    detail::MoeDispatchImpl& dispatch = *op;
    const int64_t cap = dispatch.options().max_recv_rows;
    const auto input = random_values(DType::kFloat32, static_cast<std::size_t>(s.T * s.hidden), r);
    const auto weight =
        random_values(DType::kFloat32, static_cast<std::size_t>(L * s.ffn * s.hidden), 9);
    std::vector<float> recv(static_cast<std::size_t>(cap * s.hidden)),
        out(static_cast<std::size_t>(cap * s.ffn));
    std::vector<int64_t> counts(static_cast<std::size_t>(L));
    const auto* w = reinterpret_cast<const float*>(weight.data());
    std::vector<kernels::GemmWeight> ws(static_cast<std::size_t>(L));
    for (int64_t l = 0; l < L; ++l)
      ws[l].prepare(DType::kFloat32, w + l * s.ffn * s.hidden, s.ffn, s.hidden, false);
    auto gemm = [&](int64_t l) {
      int64_t row = 0;
      for (int64_t i = 0; i < l; ++i) row += counts[i];
      if (counts[l] == 0) return;
      kernels::gemm_rows(ws[l], recv.data() + row * s.hidden, s.hidden, counts[l],
                         kernels::GemmOut{out.data() + row * s.ffn, s.ffn, DType::kFloat32});
    };
    const MoeDispatchInput in{input.data(), s.T, ids.data(), nullptr};
    const MoeDispatchOutput o{recv.data(), nullptr, nullptr, counts.data()};
    const std::vector<Stats> t = env.time_all({
        [&] { dispatch.forward(in, o); },
        [&] {
          for (int64_t l = 0; l < L; ++l) gemm(l);
          MPI_Barrier(MPI_COMM_WORLD);  // the other variants are collective; keep samples aligned
        },
        [&] {
          dispatch.forward(in, o);
          for (int64_t l = 0; l < L; ++l) gemm(l);
        },
        [&] { dispatch.forward_by_expert(in, o, gemm); },
    });
    // Check: the sequence, then the by-expert run, each against cblas_sgemm on its received rows.
    long bad = 0;
    auto check = [&] {
      int64_t rows = 0;
      for (int64_t c : counts) rows += c;
      std::vector<float> ref(static_cast<std::size_t>(rows * s.ffn));
      int64_t row = 0;
      for (int64_t l = 0; l < L; ++l) {
        if (counts[l] > 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(counts[l]),
                      static_cast<int>(s.ffn), static_cast<int>(s.hidden), 1.0f,
                      recv.data() + row * s.hidden, static_cast<int>(s.hidden),
                      w + l * s.ffn * s.hidden, static_cast<int>(s.hidden), 0.0f,
                      ref.data() + row * s.ffn, static_cast<int>(s.ffn));
        row += counts[l];
      }
      for (std::size_t i = 0; i < ref.size(); ++i)
        bad += !(std::fabs(out[i] - ref[i]) <= 1e-4 * (1.0 + std::fabs(ref[i])));
    };
    std::fill(out.begin(), out.end(), NAN);
    dispatch.forward(in, o);
    for (int64_t l = 0; l < L; ++l) gemm(l);
    check();
    std::fill(out.begin(), out.end(), NAN);
    dispatch.forward_by_expert(in, o, gemm);
    check();
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const double td = t[0].median_ms, tg = t[1].median_ms, ts = t[2].median_ms, tf = t[3].median_ms;
    const double hidden = (tg + td - tf) / std::min(tg, td);
    env.row({std::to_string(s.T), std::to_string(s.hidden), std::to_string(s.E),
             std::to_string(s.K), std::to_string(s.ffn), fmt_ms(td), fmt_ms(tg), fmt_ms(ts),
             fmt_ms(tf), fmt::format("{:.2f}", hidden), fmt::format("{:.2f}x", ts / tf),
             std::to_string(bad)});
    env.json({{"op", jstr("moe_dispatch_by_expert")},
              {"world", jnum(W)},
              {"hosts", jnum(env.ctx().num_hosts())},
              {"tokens", jnum(static_cast<double>(s.T))},
              {"hidden", jnum(static_cast<double>(s.hidden))},
              {"ffn", jnum(static_cast<double>(s.ffn))},
              {"t_comm_ms", jnum(td)},
              {"t_gemm_ms", jnum(tg)},
              {"t_unfused_ms", jnum(ts)},
              {"t_fused_ms", jnum(tf)},
              {"hidden_share", jnum(hidden)},
              {"speedup", jnum(ts / tf)},
              {"wrong", jnum(static_cast<double>(bad))}});
  }
}

}  // namespace fluxcpp::bench
