// AGKernel vs the unfused path (MPI_Allgather + one GEMM over the gathered rows), plus its
// gemm-only and comm-only paths, from compute-bound to communication-bound shapes; each shape
// also with zero-copy input (the caller writes its rows into the op's input buffer).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
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

std::vector<Shape> shapes(const Env& env) {
  const Settings& st = env.settings();
  std::vector<Shape> out;
  if (!st.shapes.empty()) {  // --shape
    for (DType d : st.dtypes)
      for (const GemmShape& g : st.shapes) out.push_back({g.m, g.n, g.k, d});
    return out;
  }
  std::vector<GemmShape> list;
  if (st.link) {
    // Shapes whose link time is at least 30 % of the GEMM's at 10 Gbit/s; the first is the
    // link probe's.
    list = {{4096, 256, 1024}};
    if (!st.quick) list.push_back({4096, 512, 1024});
  } else if (st.quick) {
    list = {{1024, 256, 1024}, {512, 1536, 1024}, {8, 1536, 1024}};
  } else {
    // A few harness shapes, from communication- to compute-bound ...
    list = {{1024, 64, 1024}, {1024, 256, 1024}, {4096, 256, 1024}, {256, 1024, 4096}};
    // ... then a layer's (hidden 1024; column-parallel QKV / MLP-up slices of 1536 and 2816
    // per rank): prefill, 512 tokens, and decode, 2 to 32 tokens over all ranks.
    for (int64_t m : {512, 2, 8, 32})
      for (int64_t n : {1536, 2816}) list.push_back({m, n, 1024});
    if (st.full)
      for (GemmShape g : {GemmShape{4096, 1024, 1024}, GemmShape{1024, 1024, 4096}})
        list.push_back(g);
  }
  for (DType d : st.dtypes)
    for (const GemmShape& g : list) {
      if (st.link && st.quick && d != DType::kFloat32) continue;
      out.push_back({g.m, g.n, g.k, d});
    }
  return out;
}

}  // namespace

void bench_ag_gemm(Env& env) {
  const int W = env.world();
  fused_header(env,
               fmt::format("ag_gemm: AllGather + GEMM, {} ranks on {} host(s); M total rows, N "
                           "columns per rank",
                           W, env.ctx().num_hosts()),
               "move");
  for (const Shape& s : shapes(env)) {
    if (!rows_fit(env, "ag_gemm", s.m)) continue;
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
    auto allgather = [&] {
      MPI_Allgather(input.data(), blk, MPI_BYTE, gathered.data(), blk, MPI_BYTE, MPI_COMM_WORLD);
    };
    auto gemm = [&] {
      w.prepare(s.dtype, weight.data(), s.n, s.k, false);
      kernels::gemm_rows(w, gathered.data(), s.k, s.m, go);
    };
    // The producer of the input writes it straight into the buffer (here: once, up front).
    std::memcpy(op.input_buffer(), input.data(), input.size());
    // Decode shapes also with the weight packed once (inference), against the same unfused path.
    std::unique_ptr<PackedWeight> packed;
    if (s.m <= kDecodeRows)
      packed = std::make_unique<PackedWeight>(env.ctx(), s.dtype, weight.data(), s.n, s.k);
    for (int variant = 0; variant < (packed ? 3 : 2); ++variant) {
      const bool zero_copy = variant == 1, use_packed = variant == 2;
      auto in = [&] { return zero_copy ? op.input_buffer() : input.data(); };
      auto fused = [&] {
        if (use_packed)
          op.forward(in(), s.m, *packed, bias.data(), out.data(), nullptr);
        else
          op.forward(in(), s.m, weight.data(), bias.data(), out.data(), nullptr);
      };
      const std::vector<Stats> t = env.time_all({
          fused,
          [&] {
            allgather();
            gemm();
          },
          [&] { op.forward_gemm_only(in(), s.m, weight.data(), bias.data(), out.data()); },
          [&] { op.forward_comm_only(in(), s.m, scratch.data()); },
          gemm,
          [&] { mpi_move(env, input.data(), 0, scratch.data(), static_cast<std::size_t>(blk)); },
      });
      // Check the fused result against the unfused one.
      fused();
      allgather();
      gemm();
      long bad = 0;
      const double tol = 1e-5 * s.k;
      for (int64_t i = 0; i < s.m * s.n; ++i)
        bad += std::fabs(value_at(out_t, out.data(), i) - value_at(out_t, ref.data(), i)) > tol;
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      fused_row(env, {"ag_gemm", s.m, s.n, s.k, s.dtype, out_t, zero_copy, use_packed}, t, bad);
    }
  }
}

}  // namespace fluxcpp::bench
