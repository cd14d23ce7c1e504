// ReduceScatter vs MPI_Reduce_scatter_block, 4 KiB to 64 MiB per rank block.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/reduce_scatter.hpp"

namespace fluxcpp::bench {

void bench_reduce_scatter(Env& env) {
  const int W = env.world();
  const int64_t n = 1024;  // f32 rows of 4 KiB
  std::vector<std::size_t> sizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                    1 << 20, 4 << 20,  16 << 20, 64 << 20};
  if (env.settings().quick) sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  const std::size_t max_bytes = sizes.back();
  ReduceScatter op(env.ctx(), {static_cast<int64_t>(max_bytes / (n * 4)) * W, n, DType::kFloat32});
  // Small integers: every summation order gives the same exact result, so #wrong is meaningful.
  std::vector<float> in(max_bytes / 4 * W), out(max_bytes / 4), ref(max_bytes / 4);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<float>((i * 7 + env.rank() * 3) % 19) - 9.0f;

  collective_header(
      env,
      fmt::format(
          "reduce_scatter: fluxcpp vs MPI_Reduce_scatter_block, f32 rows of {} elements, {} ranks",
          n, W));
  for (std::size_t bytes : sizes) {
    const int64_t m = static_cast<int64_t>(bytes / (n * 4)) * W;
    const int count = static_cast<int>(bytes / 4);
    const std::vector<Stats> t = env.time_all({
        [&] { op.forward(in.data(), m, out.data()); },
        [&] {
          MPI_Reduce_scatter_block(in.data(), ref.data(), count, MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD);
        },
    });
    long wrong = 0;
    for (int i = 0; i < count; ++i) wrong += out[i] != ref[i];
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    collective_row(env, "reduce_scatter", "n", m, n, bytes, t[0], t[1], wrong);
  }
}

}  // namespace fluxcpp::bench
