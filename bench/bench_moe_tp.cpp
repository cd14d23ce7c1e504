// The tensor-parallel MoE ops against their unfused paths. ag_scatter_grouped_gemm: MPI_Allgather
// + a gather loop into expert-major rows + one GEMM per local expert. grouped_gemm_gather_rs: one
// GEMM per local expert (accumulator type) + the weighted topk sum into per-rank partials +
// MPI_Reduce_scatter_block + the rounding. Plus each op's gemm-only and comm-only paths, the
// per-expert GEMMs alone ("GEMM") and MPI moving the bytes the op moves ("move"). M = tokens T,
// N = ffn_shard, K = hidden in the table. Routing: moe_layout of uniform random ids, ep_size 1.
// The unfused paths run OpenBLAS with as many threads as the op has compute workers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "bench.hpp"
#include "comm/context_impl.hpp"
#include "fluxcpp/ag_scatter_grouped_gemm.hpp"
#include "fluxcpp/grouped_gemm_gather_rs.hpp"
#include "fluxcpp/moe_layout.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

namespace {

struct Shape {
  int64_t T, hidden, ffn, topk, E;  // ffn: the whole width, split over the W ranks
  DType dtype;
};

std::vector<Shape> shapes(const Env& env) {
  // FLUX's layer-0 test shape scaled down by 8, and a communication-heavy one (topk 1, narrow
  // experts: the all-gather is a large share of the GEMM).
  std::vector<Shape> out = {{1024, 1024, 1024, 5, 32, DType::kFloat32},
                            {4096, 1024, 256, 1, 8, DType::kFloat32}};
  if (!env.settings().quick && !env.settings().link) {
    out.push_back({1024, 1024, 1024, 5, 32, DType::kBFloat16});
    out.push_back({4096, 1024, 256, 1, 8, DType::kBFloat16});
  }
  return out;
}

struct Routing {
  std::vector<int64_t> splits;
  std::vector<int32_t> scatter, gather;
  std::vector<float> weights;
};

Routing make_routing(const Shape& s) {
  std::vector<int32_t> ids(static_cast<std::size_t>(s.T * s.topk));
  uint64_t x = 12345;
  Routing r;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(s.E));
  }
  const MoeLayout lay = moe_layout(ids.data(), s.T, s.topk, s.E, 1);
  r.splits = lay.expert_counts;
  r.scatter = lay.scatter_index;
  r.gather = lay.gather_index;
  r.weights.resize(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) r.weights[i] = 0.25f + 0.001f * (i % 500);
  return r;
}

MoeTpOptions options_of(const Shape& s, int W) {
  MoeTpOptions o;
  o.max_tokens = s.T;
  o.hidden = s.hidden;
  o.ffn_shard = s.ffn / W;
  o.topk = s.topk;
  o.num_experts = s.E;
  o.ep_size = 1;
  o.input_dtype = s.dtype;
  o.output_dtype = DType::kFloat32;
  return o;
}

// One GEMM per expert over consecutive rows: C[rows] = A[rows] · W_e^T (W_e [n, k]).
void expert_gemms(const Routing& rt, DType in, const unsigned char* a, int64_t k,
                  const unsigned char* w, int64_t n, DType out, unsigned char* c,
                  std::vector<kernels::GemmWeight>& ws) {
  int64_t row = 0;
  const std::size_t ie = dtype_size(in), oe = dtype_size(out);
  for (std::size_t e = 0; e < rt.splits.size(); ++e) {
    const int64_t m = rt.splits[e];
    if (m > 0) {
      ws[e].prepare(in, w + e * n * k * ie, n, k, false);
      kernels::GemmOut o;
      o.c = c + row * n * oe;
      o.ldc = n;
      o.dtype = out;
      kernels::gemm_rows(ws[e], a + row * k * ie, k, m, o);
    }
    row += m;
  }
}

long count_bad(DType t, const std::vector<unsigned char>& x, const std::vector<unsigned char>& y,
               std::size_t count, double tol) {
  long bad = 0;
  for (std::size_t i = 0; i < count; ++i)
    bad += !(std::fabs(value_at(t, x.data(), i) - value_at(t, y.data(), i)) <= tol);
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return bad;
}

}  // namespace

void bench_ag_scatter_grouped_gemm(Env& env) {
  const int W = env.world();
  const int threads = env.ctx().impl()->config().compute_threads;
  fused_header(env,
               fmt::format("ag_scatter_grouped_gemm: AllGather + scatter + grouped GEMM, {} ranks "
                           "on {} host(s), ep_size 1; M tokens, N ffn_shard, K hidden",
                           W, env.ctx().num_hosts()),
               "move");
  for (const Shape& s : shapes(env)) {
    if (s.T % W != 0 || s.ffn % W != 0) continue;
    const MoeTpOptions o = options_of(s, W);
    AgScatterGroupedGemm op(env.ctx(), o);
    const Routing rt = make_routing(s);
    const int64_t per = s.T / W, H = s.hidden, F = o.ffn_shard;
    int64_t M = 0;
    for (int64_t c : rt.splits) M += c;
    const std::size_t ie = dtype_size(s.dtype);
    auto input = random_values(s.dtype, per * H, 17 + env.rank());
    auto weight = random_values(s.dtype, s.E * F * H, 91 + env.rank());
    std::vector<unsigned char> X(s.T * H * ie), A(M * H * ie), out(M * F * 4), ref(M * F * 4),
        scratch(s.T * H * ie);
    std::vector<kernels::GemmWeight> ws(static_cast<std::size_t>(s.E));
    const int blk = static_cast<int>(per * H * ie);
    auto gemm = [&] {
      expert_gemms(rt, s.dtype, A.data(), H, weight.data(), F, o.output_dtype, ref.data(), ws);
    };
    auto unfused = [&] {
      MPI_Allgather(input.data(), blk, MPI_BYTE, X.data(), blk, MPI_BYTE, MPI_COMM_WORLD);
      for (int64_t j = 0; j < M; ++j)  // the gather loop
        std::memcpy(A.data() + j * H * ie, X.data() + rt.gather[j] * H * ie, H * ie);
      gemm();
    };
    auto fused = [&] {
      op.forward(input.data(), s.T, rt.splits.data(), rt.scatter.data(), weight.data(), nullptr,
                 out.data());
    };
    // The unfused path gets as many OpenBLAS threads as the op has compute workers.
    const int saved = kernels::blas_set_threads(std::max(1, threads));
    const std::vector<Stats> t = env.time_all({
        fused,
        unfused,
        [&] {
          op.forward_gemm_only(input.data(), s.T, rt.splits.data(), rt.scatter.data(),
                               weight.data(), nullptr, out.data());
        },
        [&] {
          op.forward_comm_only(input.data(), s.T, rt.splits.data(), rt.scatter.data(),
                               scratch.data());
        },
        gemm,
        [&] { mpi_move(env, input.data(), 0, scratch.data(), static_cast<std::size_t>(blk)); },
    });
    fused();
    unfused();
    kernels::blas_set_threads(saved);
    const long bad = count_bad(o.output_dtype, out, ref, M * F, 1e-5 * H);
    fused_row(env, {"ag_scatter_grouped_gemm", s.T, F, H, s.dtype, o.output_dtype, false}, t, bad);
  }
}

void bench_grouped_gemm_gather_rs(Env& env) {
  const int W = env.world();
  const int threads = env.ctx().impl()->config().compute_threads;
  fused_header(env,
               fmt::format("grouped_gemm_gather_rs: grouped GEMM + topk sum + ReduceScatter, {} "
                           "ranks on {} host(s), ep_size 1; M tokens, N ffn_shard, K hidden",
                           W, env.ctx().num_hosts()),
               "move");
  for (const Shape& s : shapes(env)) {
    if (s.T % W != 0 || s.ffn % W != 0) continue;
    const MoeTpOptions o = options_of(s, W);
    GroupedGemmGatherRs op(env.ctx(), o);
    const Routing rt = make_routing(s);
    const int64_t per = s.T / W, H = s.hidden, F = o.ffn_shard, K = s.topk;
    int64_t M = 0;
    for (int64_t c : rt.splits) M += c;
    auto input = random_values(s.dtype, M * F, 17 + env.rank());
    auto weight = random_values(s.dtype, s.E * H * F, 91 + env.rank());
    std::vector<unsigned char> Y(M * H * 4), out(per * H * 4), ref(per * H * 4),
        scratch(s.T * H * 4);
    std::vector<float> parts(static_cast<std::size_t>(s.T * H)), mine(per * H);
    std::vector<kernels::GemmWeight> ws(static_cast<std::size_t>(s.E));
    auto gemm = [&] {
      expert_gemms(rt, s.dtype, input.data(), F, weight.data(), H, DType::kFloat32, Y.data(), ws);
    };
    auto unfused = [&] {
      gemm();
      const auto* y = reinterpret_cast<const float*>(Y.data());
      std::fill(parts.begin(), parts.end(), 0.0f);
      for (int64_t t = 0; t < s.T; ++t)  // the weighted topk sum back to token order
        for (int64_t k = 0; k < K; ++k) {
          const int64_t j = rt.scatter[t * K + k];
          if (j < 0) continue;
          const float w = rt.weights[t * K + k];
          for (int64_t h = 0; h < H; ++h) parts[t * H + h] += w * y[j * H + h];
        }
      MPI_Reduce_scatter_block(parts.data(), ref.data(), static_cast<int>(per * H), MPI_FLOAT,
                               MPI_SUM, MPI_COMM_WORLD);
    };
    auto fused = [&] {
      op.forward(input.data(), s.T, rt.splits.data(), rt.scatter.data(), weight.data(),
                 rt.weights.data(), out.data());
    };
    const std::size_t share = static_cast<std::size_t>(per * H * 4);
    // The unfused path gets as many OpenBLAS threads as the op has compute workers.
    const int saved = kernels::blas_set_threads(std::max(1, threads));
    const std::vector<Stats> t = env.time_all({
        fused,
        unfused,
        [&] {
          op.forward_gemm_only(input.data(), s.T, rt.splits.data(), rt.scatter.data(),
                               weight.data(), rt.weights.data());
        },
        [&] {
          op.forward_comm_only(s.T, rt.splits.data(), rt.scatter.data(), rt.weights.data(),
                               out.data());
        },
        gemm,
        [&] { mpi_move(env, parts.data(), share, scratch.data(), share); },
    });
    fused();
    unfused();
    kernels::blas_set_threads(saved);
    const long bad = count_bad(DType::kFloat32, out, ref, per * H, 1e-5 * F * K);
    fused_row(env, {"grouped_gemm_gather_rs", s.T, F, H, s.dtype, DType::kFloat32, false}, t, bad);
  }
}

}  // namespace fluxcpp::bench
