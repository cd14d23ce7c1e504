// The most a minimal implementation hides of a link behind a GEMM, with MPI, one core per rank:
// the ceiling the fused ops are compared with in the same run (two ranks, each on its own host).
// The shape is ag_gemm's at M = 2 x 2048 rows, N = 256, K = 1024 (f32): each rank sends its 8 MiB
// shard and multiplies all M rows by a [N, K] weight. Variants, as the link probe defines them:
//   thread: a progress thread posts the transfer and tests it every 200 us while the GEMM runs;
//   inline: one thread posts 8 chunked transfers and tests them between 8 GEMM tiles.
// The GEMM is the library's engine (oneDNN) on a weight packed once, as ../shared/tools/
// link_probe.sh builds it by default.
#include <fmt/format.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"

namespace fluxcpp::bench {

namespace {

constexpr int kML = 2048, kN = 256, kK = 1024, kChunks = 8, kTiles = 8, kPollUs = 200;

struct Probe {
  int peer;
  std::vector<float> a, b, w, c;
  std::unique_ptr<kernels::PackedWeight> packed;
  kernels::GemmWeight weight;
  void gemm(const float* x, int rows, float* out) {
    if (!packed) {
      packed = std::make_unique<kernels::PackedWeight>(DType::kFloat32, w.data(), kN, kK, false);
      weight.prepare(*packed);
    }
    kernels::gemm_rows(weight, x, kK, rows, kernels::GemmOut{out, kN, DType::kFloat32});
  }
  void gemm_only() {
    gemm(a.data(), kML, c.data());
    gemm(b.data(), kML, c.data() + static_cast<std::size_t>(kML) * kN);
  }
  void comm_only() {
    MPI_Sendrecv(a.data(), kML * kK, MPI_FLOAT, peer, 0, b.data(), kML * kK, MPI_FLOAT, peer, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  void fused_thread() {
    std::atomic<bool> arrived{false};
    std::thread progress([&] {
      MPI_Request rq[2];
      MPI_Irecv(b.data(), kML * kK, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &rq[0]);
      MPI_Isend(a.data(), kML * kK, MPI_FLOAT, peer, 1, MPI_COMM_WORLD, &rq[1]);
      for (int done = 0; !done;) {
        MPI_Testall(2, rq, &done, MPI_STATUSES_IGNORE);
        timespec ts{0, kPollUs * 1000L};
        if (!done) nanosleep(&ts, nullptr);
      }
      arrived.store(true);
    });
    gemm(a.data(), kML, c.data());  // own shard first
    while (!arrived.load()) {
      timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
    gemm(b.data(), kML, c.data() + static_cast<std::size_t>(kML) * kN);
    progress.join();
  }
  void fused_inline() {
    MPI_Request rq[2 * kChunks];
    const int rows = kML / kChunks, tile = kML / kTiles;
    int all = 0;
    for (int i = 0; i < kChunks; ++i) {
      const std::size_t off = static_cast<std::size_t>(i) * rows * kK;
      MPI_Irecv(b.data() + off, rows * kK, MPI_FLOAT, peer, 2 + i, MPI_COMM_WORLD, &rq[i]);
      MPI_Isend(a.data() + off, rows * kK, MPI_FLOAT, peer, 2 + i, MPI_COMM_WORLD,
                &rq[kChunks + i]);
    }
    for (int t = 0; t < kTiles; ++t) {
      gemm(a.data() + static_cast<std::size_t>(t) * tile * kK, tile,
           c.data() + static_cast<std::size_t>(t) * tile * kN);
      MPI_Testall(2 * kChunks, rq, &all, MPI_STATUSES_IGNORE);
    }
    for (int i = 0; i < kChunks; ++i) {
      MPI_Wait(&rq[i], MPI_STATUS_IGNORE);
      gemm(b.data() + static_cast<std::size_t>(i) * rows * kK, rows,
           c.data() + (static_cast<std::size_t>(kML) + static_cast<std::size_t>(i) * rows) * kN);
    }
    MPI_Waitall(kChunks, rq + kChunks, MPI_STATUSES_IGNORE);
  }
};

}  // namespace

void bench_link_probe(Env& env) {
  env.section(
      "link_probe: the most a minimal implementation hides (2 ranks; M=4096 N=256 K=1024 "
      "f32, 8 MiB each way)",
      {"variant", "GEMM", "move", "fused", "hidden", "speedup"});
  if (env.world() != 2) {
    env.row({"(needs 2 ranks)", "–", "–", "–", "–", "–"});
    return;
  }
  Probe p;
  p.peer = 1 - env.rank();
  p.a.resize(static_cast<std::size_t>(kML) * kK);
  p.b.resize(p.a.size());
  p.w.resize(static_cast<std::size_t>(kN) * kK);
  p.c.resize(static_cast<std::size_t>(2) * kML * kN);
  for (std::size_t i = 0; i < p.a.size(); ++i)
    p.a[i] = p.b[i] = static_cast<float>((i + env.rank()) % 7) * 0.125f;
  for (std::size_t i = 0; i < p.w.size(); ++i) p.w[i] = static_cast<float>(i % 5) * 0.25f;
  const std::vector<Stats> t = env.time_all({[&] { p.gemm_only(); }, [&] { p.comm_only(); },
                                             [&] { p.fused_thread(); }, [&] { p.fused_inline(); }});
  const double g = t[0].median_ms, c = t[1].median_ms;
  const char* names[2] = {"thread", "inline"};
  for (int v = 0; v < 2; ++v) {
    const double f = t[2 + v].median_ms;
    env.row({names[v], fmt_ms(g), fmt_ms(c), fmt_ms(f),
             fmt::format("{:.2f}", (g + c - f) / std::min(g, c)),
             fmt::format("{:.2f}x", (g + c) / f)});
    env.json({{"op", jstr("link_probe")},
              {"variant", jstr(names[v])},
              {"m", jnum(2.0 * kML)},
              {"n", jnum(kN)},
              {"k", jnum(kK)},
              {"t_gemm_ms", jnum(g)},
              {"t_move_ms", jnum(c)},
              {"t_fused_ms", jnum(f)},
              {"hidden", jnum((g + c - f) / std::min(g, c))}});
  }
}

}  // namespace fluxcpp::bench
