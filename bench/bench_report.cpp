// Reporting helpers of fluxcpp_bench: number formats, JSON, value generators, and the rows of the
// collective and fused-op tables (column definitions: docs/benchmarks.md).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::bench {

std::string fmt_ms(double ms) {
  if (!std::isfinite(ms)) return "–";  // a path the op does not have (e.g. gemm_ar's gemm-only)
  char b[32];
  if (ms < 1.0)
    std::snprintf(b, sizeof b, "%.2fus", ms * 1e3);
  else
    std::snprintf(b, sizeof b, "%.3fms", ms);
  return b;
}

std::string fmt_bytes(double v) {
  const char* u[] = {"B", "KiB", "MiB", "GiB"};
  int i = 0;
  while (v >= 1024 && i < 3) {
    v /= 1024;
    ++i;
  }
  char b[32];
  std::snprintf(b, sizeof b, v == std::floor(v) ? "%.0f%s" : "%.1f%s", v, u[i]);
  return b;
}

std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::vector<unsigned char> random_values(DType t, std::size_t count, uint64_t seed) {
  std::vector<unsigned char> v(count * dtype_size(t));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < count; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    float f = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    if (t == DType::kFloat32)
      reinterpret_cast<float*>(v.data())[i] = f;
    else if (t == DType::kFloat64)
      reinterpret_cast<double*>(v.data())[i] = f;
    else
      reinterpret_cast<uint16_t*>(v.data())[i] = kernels::f32_to_bf16(f);
  }
  return v;
}

double value_at(DType t, const unsigned char* p, std::size_t i) {
  if (t == DType::kFloat32) return reinterpret_cast<const float*>(p)[i];
  if (t == DType::kFloat64) return reinterpret_cast<const double*>(p)[i];
  return kernels::bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
}

void collective_header(Env& env, const std::string& title) {
  env.section(title, {"bytes/rank", "fluxcpp", "min", "max", "MPI", "min", "max", "GB/s",
                      "MPI GB/s", "speedup", "#wrong"});
}

void collective_row(Env& env, const char* op, const char* row_name, int64_t m, int64_t row,
                    std::size_t bytes, const Stats& ours, const Stats& mpi, long wrong,
                    bool bytes_is_total, DType dtype) {
  // Bandwidth as nccl-tests' algbw: all W blocks per rank (or, for an all-to-all, the rank's
  // whole input) over the time.
  const double total = static_cast<double>(bytes) * (bytes_is_total ? 1 : env.world());
  const double bw = total / (ours.median_ms * 1e6), bw_mpi = total / (mpi.median_ms * 1e6);
  const double speedup = mpi.median_ms / ours.median_ms;
  env.row({fmt_bytes(static_cast<double>(bytes)), fmt_ms(ours.median_ms), fmt_ms(ours.min_ms),
           fmt_ms(ours.max_ms), fmt_ms(mpi.median_ms), fmt_ms(mpi.min_ms), fmt_ms(mpi.max_ms),
           fmt::format("{:.2f}", bw), fmt::format("{:.2f}", bw_mpi),
           fmt::format("{:.2f}x", speedup), std::to_string(wrong)});
  env.json({{"op", jstr(op)},
            {"dtype", jstr(dtype_name(dtype))},
            {"world", jnum(env.world())},
            {"hosts", jnum(env.ctx().num_hosts())},
            {"m", jnum(static_cast<double>(m))},
            {row_name, jnum(static_cast<double>(row))},
            {"bytes_per_rank", jnum(static_cast<double>(bytes))},
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
            {"wrong", jnum(static_cast<double>(wrong))}});
}

void mpi_move(Env& env, const void* send, std::size_t send_stride, void* recv, std::size_t block) {
  const int W = env.world(), r = env.rank();
  if (W == 2) {
    MPI_Sendrecv(static_cast<const char*>(send) + send_stride * (1 - r), static_cast<int>(block),
                 MPI_BYTE, 1 - r, 7, static_cast<char*>(recv) + block * (1 - r),
                 static_cast<int>(block), MPI_BYTE, 1 - r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return;
  }
  std::vector<int> counts(W, static_cast<int>(block)), sdispl(W), rdispl(W);
  counts[r] = 0;
  for (int t = 0; t < W; ++t) {
    sdispl[t] = static_cast<int>(send_stride * t);
    rdispl[t] = static_cast<int>(block * t);
  }
  MPI_Alltoallv(send, counts.data(), sdispl.data(), MPI_BYTE, recv, counts.data(), rdispl.data(),
                MPI_BYTE, MPI_COMM_WORLD);
}

bool rows_fit(Env& env, const char* op, int64_t m) {
  if (m > 0 && m % env.world() == 0) return true;
  if (env.rank() == 0)
    std::printf("# %s: M = %lld skipped (not a positive multiple of %d ranks)\n", op,
                static_cast<long long>(m), env.world());
  return false;
}

void fused_header(Env& env, const std::string& title, const char* move) {
  const char* link = std::getenv("FLUXCPP_BENCH_LINK");
  env.section(link != nullptr && *link != '\0'
                  ? fmt::format("{}; hosts joined by a {} link", title, link)
                  : title,
              {"M", "N", "K", "dtype", "input", "fused", "unfused", "gemm-only", "comm-only",
               "GEMM", move, fmt::format("{}/GEMM", move), "speedup", "hidden", "limit", "#bad"});
}

void fused_row(Env& env, const FusedCase& c, const std::vector<Stats>& t, long wrong) {
  const double tf = t[0].median_ms, tu = t[1].median_ms, tg = t[4].median_ms, tc = t[5].median_ms;
  const double speedup = tu / tf;
  // As the link probe defines them: against one BLAS call and MPI moving the same bytes.
  const bool negligible = tc < 0.05 * tg;
  const double hidden = (tg + tc - tf) / std::min(tg, tc), limit = tf / std::max(tg, tc);
  env.row({std::to_string(c.m), std::to_string(c.n), std::to_string(c.k), dtype_name(c.in),
           c.packed      ? "packed"
           : c.zero_copy ? "zero-copy"
                         : "copied",
           fmt_ms(tf), fmt_ms(tu), fmt_ms(t[2].median_ms), fmt_ms(t[3].median_ms), fmt_ms(tg),
           fmt_ms(tc), fmt::format("{:.2f}", tc / tg), fmt::format("{:.2f}x", speedup),
           negligible ? "–" : fmt::format("{:.2f}", hidden), fmt::format("{:.2f}", limit),
           std::to_string(wrong)});
  const char* link = std::getenv("FLUXCPP_BENCH_LINK");
  env.json({{"op", jstr(c.op)},
            {"dtype", jstr(dtype_name(c.in))},
            {"out_dtype", jstr(dtype_name(c.out))},
            {"zero_copy", c.zero_copy ? "true" : "false"},
            {"packed", c.packed ? "true" : "false"},
            {"world", jnum(env.world())},
            {"hosts", jnum(env.ctx().num_hosts())},
            {"link", link != nullptr && *link != '\0' ? jstr(link) : "null"},
            {"m", jnum(static_cast<double>(c.m))},
            {"n", jnum(static_cast<double>(c.n))},
            {"k", jnum(static_cast<double>(c.k))},
            {"t_fused_ms", jnum(tf)},
            {"t_unfused_ms", jnum(tu)},
            {"t_gemm_only_ms", jnum(t[2].median_ms)},
            {"t_comm_only_ms", jnum(t[3].median_ms)},
            {"t_gemm_ms", jnum(tg)},
            {"t_move_ms", jnum(tc)},
            {"speedup", jnum(speedup)},
            {"hidden", negligible ? "null" : jnum(hidden)},
            {"limit_ratio", jnum(limit)},
            {"wrong", jnum(static_cast<double>(wrong))}});
}

}  // namespace fluxcpp::bench
