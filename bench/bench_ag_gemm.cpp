// AGKernel vs the unfused path (MPI_Allgather + one GEMM over the gathered rows), plus its
// gemm-only and comm-only paths, from compute-bound to communication-bound shapes.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/ag_gemm.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

namespace {

struct Shape {
  int64_t m, n, k;  // m: total rows (all ranks); n: this rank's columns
  DType dtype;
};

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
  fused_header(env,
               fmt::format("ag_gemm: AllGather + GEMM, {} ranks on {} host(s); M total rows, N "
                           "columns per rank",
                           W, env.ctx().num_nodes()),
               "AG");
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
    auto input = random_values(s.dtype, rows * s.k, 17 + env.rank());
    auto weight = random_values(s.dtype, s.n * s.k, 91 + env.rank());
    auto bias = random_values(out_t, s.n, 5);
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
      bad += std::fabs(value_at(out_t, out.data(), i) - value_at(out_t, ref.data(), i)) > tol;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);

    fused_row(env, "ag_gemm", "AG", s.m, s.n, s.k, s.dtype, out_t, t, bad);
  }
}

}  // namespace fluxcpp::bench
