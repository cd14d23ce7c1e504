// AllReduce vs MPI_Allreduce (MPI_SUM), 4 KiB to 64 MiB per rank, in f32 and bf16.
//
// bf16: MPI has no bf16 type (nor a bf16 MPI_SUM), so the bf16 rows time MPI_Allreduce on f32 of
// the same element count, i.e. what a user without fluxcpp reduces (a bf16 tensor widened to f32,
// as the unfused paths of gemm_rs and the MoE ops reduce in f32). MPI moves twice the bytes there;
// the widening and the rounding back are not timed. The table's bytes/rank and GB/s are the bf16
// buffer's for both columns.
//
// #wrong: the inputs are small integers, exact in f32 and bf16, whose sums over the ranks are exact
// in either type, so every summation order gives the same result and the op's output must equal
// MPI's bit for bit (bf16: MPI's f32 sum rounded to bf16, which is exact here).
#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/all_reduce.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::bench {

void bench_all_reduce(Env& env) {
  const int W = env.world();
  std::vector<std::size_t> sizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                    1 << 20, 4 << 20,  16 << 20, 64 << 20};
  if (env.settings().quick) sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  const std::size_t max_bytes = sizes.back();

  for (const DType d : env.settings().dtypes) {
    const std::size_t esz = dtype_size(d);
    const std::size_t max_count = max_bytes / esz;
    AllReduce op(env.ctx(), {static_cast<int64_t>(max_count), d});
    // The op's input and output in dtype d; the MPI reference's input and output in f32.
    std::vector<unsigned char> in(max_bytes), out(max_bytes);
    std::vector<float> in32(max_count), ref(max_count);
    for (std::size_t i = 0; i < max_count; ++i) {
      in32[i] = static_cast<float>((i * 7 + env.rank() * 3) % 19) - 9.0f;
      if (d == DType::kFloat32)
        reinterpret_cast<float*>(in.data())[i] = in32[i];
      else
        reinterpret_cast<uint16_t*>(in.data())[i] = kernels::f32_to_bf16(in32[i]);
    }

    collective_header(env,
                      fmt::format("all_reduce: fluxcpp vs MPI_Allreduce (MPI_SUM{}), {}, {} ranks",
                                  d == DType::kFloat32 ? "" : " on f32 of the same element count",
                                  dtype_name(d), W));
    for (std::size_t bytes : sizes) {
      const int64_t count = static_cast<int64_t>(bytes / esz);
      const std::vector<Stats> t = env.time_all({
          [&] { op.forward(in.data(), count, out.data()); },
          [&] {
            MPI_Allreduce(in32.data(), ref.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
          },
      });
      long wrong = 0;
      for (int64_t i = 0; i < count; ++i)
        wrong += value_at(d, out.data(), static_cast<std::size_t>(i)) != ref[i];
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      // bytes_is_total: an all-reduce's algbw is the rank's buffer over the time (nccl-tests).
      collective_row(env, "all_reduce", "count", 1, count, bytes, t[0], t[1], wrong, true, d);
    }
  }
}

}  // namespace fluxcpp::bench
