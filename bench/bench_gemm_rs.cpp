// GemmRS vs the unfused path (one GEMM + MPI_Reduce_scatter_block), plus its gemm-only and
// comm-only paths, from compute-bound to communication-bound shapes. The `move` reference moves
// the partial blocks between ranks: the bytes a reduce-scatter moves, without its sums.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/gemm_rs.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

void bench_gemm_rs(Env& env) {
  const int W = env.world();
  struct Shape {
    int64_t m, n, k;  // m: total rows (all on every rank); k: this rank's slice of the reduction
    DType dtype;
  };
  const Settings& st = env.settings();
  std::vector<GemmShape> list;
  if (!st.shapes.empty()) {  // --shape
    list = st.shapes;
  } else if (st.link) {
    // Link time at least 30 % of the GEMM's at 10 Gbit/s; the first moves the link probe's bytes
    // behind the same flops.
    list = {{2048, 2048, 256}};
    if (!st.quick) list.push_back({4096, 1024, 256});
  } else if (st.quick) {
    list = {{1024, 1024, 256}, {512, 1024, 1408}, {8, 1024, 512}};
  } else {
    // A few harness shapes, from communication- to compute-bound ...
    list = {{1024, 256, 256},
            {1024, 1024, 64},
            {1024, 1024, 256},
            {1024, 4096, 256},
            {4096, 1024, 256}};
    // ... then a layer's (hidden 1024; row-parallel attention-out / MLP-down slices of 512 and
    // 1408 per rank): prefill, 512 tokens, and decode, 2 to 32 tokens over all ranks.
    for (int64_t m : {512, 2, 8, 32})
      for (int64_t k : {512, 1408}) list.push_back({m, 1024, k});
    if (st.full)
      for (GemmShape g : {GemmShape{1024, 4096, 1024}, GemmShape{4096, 4096, 256}})
        list.push_back(g);
  }
  std::vector<Shape> shapes;
  for (DType d : st.dtypes)
    for (const GemmShape& g : list) {
      // Link mode: bf16 only for 2048x2048x256, and not with --quick.
      if (st.link && st.shapes.empty() && d != DType::kFloat32 && (st.quick || g.m != 2048))
        continue;
      shapes.push_back({g.m, g.n, g.k, d});
    }
  fused_header(env,
               fmt::format("gemm_rs: GEMM + ReduceScatter, {} ranks on {} host(s); M total rows, "
                           "K per rank, f32 output",
                           W, env.ctx().num_hosts()),
               "move");
  for (const Shape& s : shapes) {
    if (!rows_fit(env, "gemm_rs", s.m)) continue;
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
    std::vector<float> out(rows * s.n), ref(rows * s.n), partial(s.m * s.n), moved(s.m * s.n);
    kernels::GemmWeight w;
    kernels::GemmOut go;
    go.c = partial.data();
    go.ldc = s.n;
    auto gemm = [&] {
      w.prepare(s.dtype, weight.data(), s.n, s.k, false);
      kernels::gemm_rows(w, input.data(), s.k, s.m, go);
    };
    // The bytes a reduce-scatter moves (each rank's partial of every other rank's block), without
    // the reduction.
    const std::size_t part = static_cast<std::size_t>(rows * s.n) * sizeof(float);
    auto move = [&] { mpi_move(env, partial.data(), part, moved.data(), part); };
    auto unfused = [&] {
      gemm();
      MPI_Reduce_scatter_block(partial.data(), ref.data(), static_cast<int>(rows * s.n), MPI_FLOAT,
                               MPI_SUM, MPI_COMM_WORLD);
      const float* b = reinterpret_cast<const float*>(bias.data());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < s.n; ++j) ref[i * s.n + j] += b[j];
    };
    // Decode shapes also with the weight packed once (inference), against the same unfused path.
    std::unique_ptr<PackedWeight> packed;
    if (s.m <= kDecodeRows)
      packed = std::make_unique<PackedWeight>(env.ctx(), s.dtype, weight.data(), s.n, s.k);
    for (int variant = 0; variant < (packed ? 2 : 1); ++variant) {
      auto fused = [&] {
        if (variant == 1)
          op.forward(input.data(), s.m, *packed, bias.data(), out.data());
        else
          op.forward(input.data(), s.m, weight.data(), bias.data(), out.data());
      };
      const std::vector<Stats> t = env.time_all({
          fused,
          unfused,
          [&] { op.forward_gemm_only(input.data(), s.m, weight.data()); },
          [&] { op.forward_comm_only(s.m, nullptr, out.data()); },
          gemm,
          move,
      });
      fused();
      unfused();
      long bad = 0;
      const double tol = 1e-5 * s.k * W;
      for (int64_t i = 0; i < rows * s.n; ++i) bad += std::fabs(out[i] - ref[i]) > tol;
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      fused_row(env, {"gemm_rs", s.m, s.n, s.k, s.dtype, DType::kFloat32, false, variant == 1}, t,
                bad);
    }
  }
}

}  // namespace fluxcpp::bench
