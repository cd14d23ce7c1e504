// AllGather vs MPI_Allgather, 4 KiB to 64 MiB per rank.
#include <cstring>
#include <vector>

#include "bench.hpp"

#include <fmt/format.h>
#include "fluxcpp/all_gather.hpp"

namespace fluxcpp::bench {

void bench_all_gather(Env& env) {
  const int W = env.world();
  const int64_t k = 1024;  // f32 rows of 4 KiB
  std::vector<std::size_t> sizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                    1 << 20, 4 << 20,  16 << 20, 64 << 20};
  if (env.settings().quick) sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  const std::size_t max_bytes = sizes.back();
  AllGather op(env.ctx(), {static_cast<int64_t>(max_bytes / (k * 4)) * W, k, DType::kFloat32});
  std::vector<unsigned char> in(max_bytes), out(max_bytes * W), ref(max_bytes * W);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<unsigned char>(i * 131 + env.rank() * 7);

  collective_header(
      env,
      fmt::format("all_gather: fluxcpp vs MPI_Allgather, f32 rows of {} elements, {} ranks", k, W));
  for (std::size_t bytes : sizes) {
    const int64_t m = static_cast<int64_t>(bytes / (k * 4)) * W;
    const std::vector<Stats> t = env.time_all({
        [&] { op.forward(in.data(), m, out.data()); },
        [&] {
          MPI_Allgather(in.data(), static_cast<int>(bytes), MPI_BYTE, ref.data(),
                        static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
        },
    });
    long wrong = 0;
    for (std::size_t i = 0; i < bytes * W; ++i) wrong += out[i] != ref[i];
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    collective_row(env, "all_gather", "k", m, k, bytes, t[0], t[1], wrong);
  }
}

}  // namespace fluxcpp::bench
