// InplaceCast: fluxcpp on the calling thread alone (ctx = nullptr) and on the context's threads,
// against a plain in-place loop and a memcpy of the buffer's bytes, every pair, 1 Mi to
// 64 Mi elements and FLUX's odd sizes. The op is local: every rank converts its own buffers.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "bench.hpp"
#include "comm/context_impl.hpp"
#include "fluxcpp/inplace_cast.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::bench {
namespace {

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// The loop anyone would write first: one element at a time, forward when narrowing, backward
// when widening. (g++ -O3 vectorises the f64 -> f32 one by itself: its dependence analysis sees
// that each store trails the loads.)
void plain_cast(unsigned char* p, int64_t n, DType from, DType to) {
  if (from == DType::kFloat32 && to == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) store(p + 2 * i, kernels::f32_to_bf16(load<float>(p + 4 * i)));
  } else if (from == DType::kFloat64) {
    for (int64_t i = 0; i < n; ++i) store(p + 4 * i, static_cast<float>(load<double>(p + 8 * i)));
  } else if (from == DType::kBFloat16) {
    for (int64_t i = n - 1; i >= 0; --i)
      store(p + 4 * i, kernels::bf16_to_f32(load<uint16_t>(p + 2 * i)));
  } else {
    for (int64_t i = n - 1; i >= 0; --i)
      store(p + 8 * i, static_cast<double>(load<float>(p + 4 * i)));
  }
}

}  // namespace

void bench_inplace_cast(Env& env) {
  const DType pairs[][2] = {{DType::kFloat32, DType::kBFloat16},
                            {DType::kFloat64, DType::kFloat32},
                            {DType::kBFloat16, DType::kFloat32},
                            {DType::kFloat32, DType::kFloat64}};
  std::vector<int64_t> sizes = {1 << 20, 1048571, 2097143,  4 << 20,
                                4194301, 8388605, 16 << 20, 64 << 20};
  if (env.settings().quick) sizes = {1 << 20, 1048571, 8388605, 64 << 20};
  const int64_t max_n = *std::max_element(sizes.begin(), sizes.end());
  // buf is converted in place; src holds the inputs and is also memcpy's source, dst its target.
  std::vector<unsigned char> buf(static_cast<std::size_t>(max_n) * 8);
  std::vector<unsigned char> src(buf.size()), dst(buf.size());
  const int threads = env.ctx().impl()->config().compute_threads;
  env.section(
      fmt::format("inplace_cast: 1 thread (ctx = nullptr) and {} threads (ctx) vs a plain loop "
                  "and a memcpy of count*max(sizeof(from), sizeof(to)) bytes; GB/s = bytes read + "
                  "written per second; x memcpy = t(memcpy) / t(cast)",
                  threads),
      {"pair", "count", "buffer", "1 thread", "GB/s", "x memcpy",
       fmt::format("{} threads", threads), "GB/s", "x memcpy", "plain loop", "memcpy", "GB/s",
       "#wrong"});
  for (const auto& pr : pairs) {
    const DType from = pr[0], to = pr[1];
    const std::size_t sf = dtype_size(from), st = dtype_size(to);
    for (int64_t n : sizes) {
      const std::size_t in_bytes = static_cast<std::size_t>(n) * sf;
      const std::size_t bytes = static_cast<std::size_t>(n) * std::max(sf, st);
      const std::vector<unsigned char> values =
          random_values(from, static_cast<std::size_t>(n), 7 + env.rank());
      std::copy(values.begin(), values.end(), src.begin());
      // Both fluxcpp variants against the plain loop, on fresh inputs.
      std::memcpy(dst.data(), src.data(), in_bytes);
      plain_cast(dst.data(), n, from, to);
      long wrong = 0;
      const Context* const variants[] = {nullptr, &env.ctx()};
      for (const Context* ctx : variants) {
        std::memcpy(buf.data(), src.data(), in_bytes);
        inplace_cast(ctx, buf.data(), n, from, to);
        for (int64_t i = 0; i < n; ++i)
          wrong += std::memcmp(buf.data() + i * st, dst.data() + i * st, st) != 0;
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
      // The timed calls convert the buffer again and again: after the first call its bytes are
      // earlier outputs read as inputs (some NaN, denormal or zero). The vector paths have no
      // data-dependent branches, and their f64 <-> f32 conversions took the same time on normal,
      // denormal and zero values when this entry was written.
      std::memcpy(buf.data(), src.data(), in_bytes);
      const std::vector<Stats> t = env.time_all({
          [&] { inplace_cast(nullptr, buf.data(), n, from, to); },
          [&] { inplace_cast(&env.ctx(), buf.data(), n, from, to); },
          [&] { plain_cast(buf.data(), n, from, to); },
          [&] { std::memcpy(dst.data(), src.data(), bytes); },
      });
      const double moved = static_cast<double>(n) * static_cast<double>(sf + st);
      auto gbs = [](double b, const Stats& s) { return b / (s.median_ms * 1e6); };
      const double r1 = t[3].median_ms / t[0].median_ms, rn = t[3].median_ms / t[1].median_ms;
      const std::string pair = fmt::format("{}->{}", dtype_name(from), dtype_name(to));
      env.row({pair, std::to_string(n), fmt_bytes(static_cast<double>(bytes)),
               fmt_ms(t[0].median_ms), fmt::format("{:.2f}", gbs(moved, t[0])),
               fmt::format("{:.2f}", r1), fmt_ms(t[1].median_ms),
               fmt::format("{:.2f}", gbs(moved, t[1])), fmt::format("{:.2f}", rn),
               fmt_ms(t[2].median_ms), fmt_ms(t[3].median_ms),
               fmt::format("{:.2f}", gbs(2.0 * static_cast<double>(bytes), t[3])),
               std::to_string(wrong)});
      env.json({{"op", jstr("inplace_cast")},
                {"from", jstr(dtype_name(from))},
                {"to", jstr(dtype_name(to))},
                {"world", jnum(env.world())},
                {"count", std::to_string(n)},
                {"bytes", std::to_string(bytes)},
                {"threads", jnum(threads)},
                {"t_1thread_ms", jnum(t[0].median_ms)},
                {"t_threads_ms", jnum(t[1].median_ms)},
                {"t_plain_loop_ms", jnum(t[2].median_ms)},
                {"t_memcpy_ms", jnum(t[3].median_ms)},
                {"t_1thread_min_ms", jnum(t[0].min_ms)},
                {"t_threads_min_ms", jnum(t[1].min_ms)},
                {"t_plain_loop_min_ms", jnum(t[2].min_ms)},
                {"t_memcpy_min_ms", jnum(t[3].min_ms)},
                {"gbs_1thread", jnum(gbs(moved, t[0]))},
                {"gbs_threads", jnum(gbs(moved, t[1]))},
                {"gbs_memcpy", jnum(gbs(2.0 * static_cast<double>(bytes), t[3]))},
                {"ratio_memcpy_1thread", jnum(r1)},
                {"ratio_memcpy_threads", jnum(rn)},
                {"wrong", jnum(static_cast<double>(wrong))}});
    }
  }
}

}  // namespace fluxcpp::bench
