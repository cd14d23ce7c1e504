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

  env.section(
      fmt::format("all_gather: fluxcpp vs MPI_Allgather, f32 rows of {} elements, {} ranks", k, W),
      {"bytes/rank", "fluxcpp", "min", "max", "MPI", "min", "max", "GB/s", "MPI GB/s", "speedup",
       "#wrong"});
  for (std::size_t bytes : sizes) {
    const int64_t m = static_cast<int64_t>(bytes / (k * 4)) * W;
    const std::vector<Stats> t = env.time_all({
        [&] { op.forward(in.data(), m, out.data()); },
        [&] {
          MPI_Allgather(in.data(), static_cast<int>(bytes), MPI_BYTE, ref.data(),
                        static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
        },
    });
    const Stats ours = t[0], mpi = t[1];
    long wrong = 0;
    for (std::size_t i = 0; i < bytes * W; ++i) wrong += out[i] != ref[i];
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const double total = static_cast<double>(bytes) * W;
    const double bw = total / (ours.median_ms * 1e6), bw_mpi = total / (mpi.median_ms * 1e6);
    const double speedup = mpi.median_ms / ours.median_ms;
    env.row({fmt_bytes(bytes), fmt_ms(ours.median_ms), fmt_ms(ours.min_ms), fmt_ms(ours.max_ms),
             fmt_ms(mpi.median_ms), fmt_ms(mpi.min_ms), fmt_ms(mpi.max_ms),
             fmt::format("{:.2f}", bw), fmt::format("{:.2f}", bw_mpi),
             fmt::format("{:.2f}x", speedup), std::to_string(wrong)});
    env.json({{"op", jstr("all_gather")},
              {"dtype", jstr("f32")},
              {"world", jnum(W)},
              {"hosts", jnum(env.ctx().num_nodes())},
              {"m", jnum(m)},
              {"k", jnum(k)},
              {"bytes_per_rank", jnum(bytes)},
              {"t_fused_ms", jnum(ours.median_ms)},
              {"t_fused_min_ms", jnum(ours.min_ms)},
              {"t_fused_max_ms", jnum(ours.max_ms)},
              {"t_unfused_ms", jnum(mpi.median_ms)},
              {"t_gemm_ms", jnum(0)},
              {"t_comm_ms", jnum(ours.median_ms)},
              {"speedup", jnum(speedup)},
              {"overlap_eff", "null"},
              {"algbw_gbs", jnum(bw)},
              {"algbw_unfused_gbs", jnum(bw_mpi)},
              {"wrong", jnum(wrong)}});
  }
}

}  // namespace fluxcpp::bench
