// grouped_gemm vs the unfused baseline on the same GEMM engine: a loop over the groups of one
// kernels::gemm_rows call each (GemmEngine::kAuto: oneDNN for f32 and bf16), the per-group scale
// folded into the call (GemmOut::scale), bf16 in and out as the op. With compute_threads > 1 the
// loop runs on as many threads (the caller + a persistent crew, so oneDNN's per-thread primitive
// caches stay warm), thread t taking a contiguous slice of the n columns of every group (one
// gemm_tile call per group per thread). T tokens × topk rows spread over E groups (balanced, or
// skewed: one group takes half the rows), n = k = hidden.
// For context only, "OpenBLAS loop": a loop of cblas_sgemm over the groups with OpenBLAS given the
// op's thread count; bf16 there widens the input and the weights of the non-empty groups first
// and rounds the output (what the old engine did). #bad counts elements where the op disagrees
// with either loop.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "comm/context_impl.hpp"
#include "fluxcpp/grouped_gemm.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {
namespace {

struct Shape {
  int64_t tokens, topk, groups, hidden;
};

// Rows per group: balanced (m/G, the remainder to the first groups) or skewed (group G/2 takes
// half, the rest share the other half).
std::vector<int64_t> make_splits(int64_t m, int64_t G, bool skewed) {
  std::vector<int64_t> s(static_cast<std::size_t>(G), 0);
  const int64_t big = skewed ? m / 2 : 0;
  const int64_t others = skewed ? G - 1 : G, rest = m - big;
  for (int64_t g = 0, i = 0; g < G; ++g) {
    if (skewed && g == G / 2) continue;
    s[g] = rest / others + (i++ < rest % others ? 1 : 0);
  }
  if (skewed) s[G / 2] = big;
  return s;
}

// run(f) calls f(0) on the calling thread and f(1..n-1) on n-1 persistent threads, and returns
// when all are done. Persistent, so that the oneDNN primitives each thread caches survive calls.
class Crew {
 public:
  explicit Crew(int n) {
    for (int i = 1; i < n; ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~Crew() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  void run(const std::function<void(int)>& f) {
    if (threads_.empty()) return f(0);
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &f;
      done_ = 0;
      ++generation_;
    }
    cv_.notify_all();
    f(0);
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return done_ == threads_.size(); });
  }

 private:
  void loop(int i) {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const std::function<void(int)>* f = job_;
      lk.unlock();
      (*f)(i);
      lk.lock();
      if (++done_ == threads_.size()) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  std::size_t done_ = 0;
  bool stop_ = false;
};

}  // namespace

void bench_grouped_gemm(Env& env) {
  const bool quick = env.settings().quick, full = env.settings().full;
  std::vector<Shape> shapes;
  if (full) {
    for (int64_t hidden : {1024, 4096})
      for (int64_t tokens : {512, 4096})
        for (int64_t topk : {2, 6})
          for (int64_t groups : {8, 64})
            // f32 weights above 1 GiB per rank do not fit the machines this runs on.
            if (groups * hidden * hidden * 4 <= (int64_t{1} << 30))
              shapes.push_back({tokens, topk, groups, hidden});
  } else {
    shapes = {{512, 2, 8, 1024}, {512, 6, 64, 1024}};
    if (!quick) shapes.push_back({4096, 2, 8, 1024});
  }
  const int threads = std::max(1, env.ctx().impl()->config().compute_threads);
  Crew crew(threads);
  env.section(
      fmt::format("grouped_gemm: local, {} compute thread(s) per rank vs a loop of one gemm_rows "
                  "per group on the same engine (kAuto: oneDNN for f32/bf16) on {} thread(s){}; "
                  "OpenBLAS loop = cblas_sgemm per group on {} OpenBLAS thread(s), context only; "
                  "every rank runs its own; n = k = hidden",
                  threads, threads, threads > 1 ? " (columns split)" : "", threads),
      {"tokens", "topk", "E", "hidden", "dtype", "splits", "max rows", "grouped", "oneDNN loop",
       "loop/grouped", "OpenBLAS loop", "BLAS/grouped", "GFLOP/s", "#bad"});
  for (DType dt : {DType::kFloat32, DType::kBFloat16})
    for (const Shape& sh : shapes)
      for (bool skewed : {false, true}) {
        const int64_t m = sh.tokens * sh.topk, G = sh.groups, n = sh.hidden, k = sh.hidden;
        const std::vector<int64_t> splits = make_splits(m, G, skewed);
        GroupedGemmOptions o;
        o.num_groups = G;
        o.max_m = m;
        o.n = n;
        o.k = k;
        o.input_dtype = dt;
        o.output_dtype = dt;
        GroupedGemm op(env.ctx(), o);
        const auto input = random_values(dt, static_cast<std::size_t>(m * k), 5 + env.rank());
        const auto weight = random_values(dt, static_cast<std::size_t>(G * n * k), 9 + env.rank());
        std::vector<float> scale(static_cast<std::size_t>(G));
        for (int64_t g = 0; g < G; ++g) scale[g] = 0.5f + static_cast<float>(g % 5) / 4.0f;
        const std::size_t esz = dtype_size(dt);
        std::vector<unsigned char> out(static_cast<std::size_t>(m * n) * esz),
            ref(static_cast<std::size_t>(m * n) * esz),
            ref_blas(static_cast<std::size_t>(m * n) * esz);

        // The baseline: per group, one call on the engine the op uses (the weight viewed in
        // place, as the op does every call). Thread t of `threads` takes columns [n0, n1).
        std::vector<kernels::GemmWeight> ws(static_cast<std::size_t>(threads));
        const std::function<void(int)> slice = [&](int t) {
          const int64_t n0 = n * t / threads, n1 = n * (t + 1) / threads;
          kernels::GemmWeight& w = ws[static_cast<std::size_t>(t)];
          int64_t row = 0;
          for (int64_t g = 0; g < G; ++g) {
            if (splits[g] > 0) {
              w.prepare(dt, weight.data() + static_cast<std::size_t>(g * n * k) * esz, n, k, false);
              kernels::GemmOut go;
              go.c = ref.data() + static_cast<std::size_t>(row * n + n0) * esz;
              go.ldc = n;
              go.dtype = dt;
              go.scale = scale[g];
              const void* a = input.data() + static_cast<std::size_t>(row * k) * esz;
              if (threads == 1)
                kernels::gemm_rows(w, a, k, splits[g], go);
              else
                kernels::gemm_tile(w, a, k, splits[g], n0, n1, go);
            }
            row += splits[g];
          }
        };
        auto loop = [&] { crew.run(slice); };

        // Context: the old engine's loop (f32 views, bf16 widened into in32/w32 by the loop).
        std::vector<float> in32(static_cast<std::size_t>(m * k)),
            w32(static_cast<std::size_t>(G * n * k)), c32(static_cast<std::size_t>(m * n));
        const auto* in16 = reinterpret_cast<const uint16_t*>(input.data());
        const auto* w16 = reinterpret_cast<const uint16_t*>(weight.data());
        const float* a32 =
            dt == DType::kFloat32 ? reinterpret_cast<const float*>(input.data()) : in32.data();
        const float* b32 =
            dt == DType::kFloat32 ? reinterpret_cast<const float*>(weight.data()) : w32.data();
        float* c = dt == DType::kFloat32 ? reinterpret_cast<float*>(ref_blas.data()) : c32.data();
        auto blas_loop = [&] {
          if (dt == DType::kBFloat16) {
            kernels::bf16_to_f32(in16, in32.data(), m * k);
            for (int64_t g = 0; g < G; ++g)
              if (splits[g] > 0)
                kernels::bf16_to_f32(w16 + g * n * k, w32.data() + g * n * k, n * k);
          }
          int64_t row = 0;
          for (int64_t g = 0; g < G; ++g) {
            if (splits[g] > 0)
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(splits[g]),
                          static_cast<blasint>(n), static_cast<blasint>(k), scale[g], a32 + row * k,
                          static_cast<blasint>(k), b32 + g * n * k, static_cast<blasint>(k), 0.0f,
                          c + row * n, static_cast<blasint>(n));
            row += splits[g];
          }
          if (dt == DType::kBFloat16)
            kernels::f32_to_bf16(c32.data(), reinterpret_cast<uint16_t*>(ref_blas.data()), m * n);
        };
        auto ours = [&] {
          op.forward(input.data(), splits.data(), weight.data(), scale.data(), out.data());
        };
        // OpenBLAS gets the op's thread count for its loop; the op runs it on one thread inside
        // its call and restores this setting afterwards. The oneDNN loop is unaffected.
        const int saved = kernels::blas_set_threads(threads);
        const std::vector<Stats> t = env.time_all({ours, loop, blas_loop});
        ours();
        loop();
        blas_loop();
        kernels::blas_set_threads(saved);
        long bad = 0;
        const double rel = dt == DType::kBFloat16 ? 1.0 / 64 : 1e-4;
        for (int64_t i = 0; i < m * n; ++i) {
          const double x = value_at(dt, out.data(), i);
          for (const auto* r : {&ref, &ref_blas}) {
            const double y = value_at(dt, r->data(), i);
            if (!(std::fabs(x - y) <= rel * (1.0 + std::fabs(y)))) {
              ++bad;
              break;
            }
          }
        }
        MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        const double tg = t[0].median_ms, tl = t[1].median_ms, tb = t[2].median_ms;
        const double gflop = 2.0 * m * n * k / 1e9;
        const int64_t max_rows = *std::max_element(splits.begin(), splits.end());
        env.row({std::to_string(sh.tokens), std::to_string(sh.topk), std::to_string(G),
                 std::to_string(sh.hidden), dtype_name(dt), skewed ? "skewed" : "balanced",
                 std::to_string(max_rows), fmt_ms(tg), fmt_ms(tl), fmt::format("{:.2f}", tl / tg),
                 fmt_ms(tb), fmt::format("{:.2f}", tb / tg),
                 fmt::format("{:.1f}", gflop / (tg * 1e-3)), std::to_string(bad)});
        env.json({{"op", jstr("grouped_gemm")},
                  {"dtype", jstr(dtype_name(dt))},
                  {"out_dtype", jstr(dtype_name(dt))},
                  {"world", jnum(env.world())},
                  {"compute_threads", jnum(threads)},
                  {"tokens", jnum(static_cast<double>(sh.tokens))},
                  {"topk", jnum(static_cast<double>(sh.topk))},
                  {"groups", jnum(static_cast<double>(G))},
                  {"m", jnum(static_cast<double>(m))},
                  {"n", jnum(static_cast<double>(n))},
                  {"k", jnum(static_cast<double>(k))},
                  {"splits", jstr(skewed ? "skewed" : "balanced")},
                  {"t_fused_ms", jnum(tg)},
                  {"t_unfused_ms", jnum(tl)},
                  {"unfused_engine", jstr(kernels::gemm_engine_name(ws[0].engine()))},
                  {"t_openblas_loop_ms", jnum(tb)},
                  {"speedup", jnum(tl / tg)},
                  {"overlap_eff", "null"},
                  {"wrong", jnum(static_cast<double>(bad))}});
      }
}

}  // namespace fluxcpp::bench
