// The all-to-all family: All2AllSingle vs MPI_Alltoallv, and each fused op (a2a_gemm, Ulysses
// gemm_a2a_transpose / a2a_transpose_gemm) vs its unfused path (MPI_Alltoall plus the plain GEMM
// and the layout copies MPI cannot do), from compute-bound to communication-bound shapes.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/a2a_gemm.hpp"
#include "fluxcpp/all_to_all_single.hpp"
#include "fluxcpp/ulysses.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

namespace {

using Bytes = std::vector<unsigned char>;

long count_wrong(DType t, const Bytes& a, const Bytes& b, std::size_t count, double tol) {
  long bad = 0;
  for (std::size_t i = 0; i < count; ++i)
    bad += std::fabs(value_at(t, a.data(), i) - value_at(t, b.data(), i)) > tol;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return bad;
}

// Skip the heaviest GEMMs unless --full (2·rows·n·k flops per rank).
bool too_heavy(const Env& env, double rows, double n, double k) {
  return !env.settings().full && 2.0 * rows * n * k > 4.5e9;
}

}  // namespace

void bench_all_to_all_single(Env& env) {
  const int W = env.world();
  const int64_t n = 256;  // f32 rows of 1 KiB
  const std::size_t row = n * 4;
  std::vector<std::size_t> sizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                    1 << 20, 4 << 20,  16 << 20, 64 << 20};
  if (env.settings().quick) sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  auto rows_per_peer = [&](std::size_t bytes) {
    return std::max<int64_t>(1, static_cast<int64_t>(bytes / (row * W)));
  };
  const int64_t max_rows = rows_per_peer(sizes.back()) * W;
  AllToAllSingle op(env.ctx(), {max_rows, n, DType::kFloat32});
  Bytes in(max_rows * row), out(max_rows * row), ref(max_rows * row);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<unsigned char>(i * 131 + env.rank() * 7);
  collective_header(env, fmt::format("all_to_all_single: fluxcpp vs MPI_Alltoallv, equal splits, "
                                     "f32 rows of {} elements, {} ranks; bytes = each rank's input",
                                     n, W));
  for (std::size_t size : sizes) {
    const int64_t per = rows_per_peer(size);
    std::vector<int64_t> splits(W, per);
    std::vector<int> counts(W, static_cast<int>(per * row)), displs(W);
    for (int t = 0; t < W; ++t) displs[t] = static_cast<int>(t * per * row);
    const std::vector<Stats> t = env.time_all({
        [&] { op.forward(in.data(), splits.data(), out.data(), splits.data()); },
        [&] {
          MPI_Alltoallv(in.data(), counts.data(), displs.data(), MPI_BYTE, ref.data(),
                        counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD);
        },
    });
    const std::size_t bytes = per * W * row;
    long wrong = 0;
    for (std::size_t i = 0; i < bytes; ++i) wrong += out[i] != ref[i];
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    collective_row(env, "all_to_all_single", "n", per * W, n, bytes, t[0], t[1], wrong,
                   /*bytes_is_total=*/true);
  }
}

void bench_a2a_gemm(Env& env) {
  const int W = env.world();
  fused_header(env,
               fmt::format("a2a_gemm: AllToAll + GEMM, {} ranks on {} host(s); M rows per rank "
                           "(M/W to each peer), N columns, K = row length",
                           W, env.ctx().num_hosts()),
               "move");
  const Settings& st = env.settings();
  struct Case {
    int64_t m, n, k;
    DType d;
  };
  std::vector<Case> cases;
  for (DType d : st.dtypes) {
    if (!st.shapes.empty()) {  // --shape
      for (const GemmShape& g : st.shapes) cases.push_back({g.m, g.n, g.k, d});
      continue;
    }
    for (int64_t m : {1024, 4096})
      for (int64_t k : {1024, 4096})
        for (int64_t n : {128, 256, 1024}) {
          if (too_heavy(env, m, n, k)) continue;
          // Link mode: the shapes whose exchange is at least 30 % of the GEMM at 10 Gbit/s.
          if (st.link != (m == 4096 && k == 1024 && n <= 256)) continue;
          if (!st.link && n == 256) continue;
          if (st.quick && !st.link && (m != 1024 || k != 1024)) continue;
          if (st.quick && st.link && (n != 256 || d != DType::kFloat32)) continue;
          cases.push_back({m, n, k, d});
        }
  }
  for (const Case& c : cases) {
    const int64_t m = c.m, n = c.n, k = c.k;
    const DType d = c.d;
    if (!rows_fit(env, "a2a_gemm", m)) continue;
    const DType out_t = DType::kFloat32;
    const std::size_t esz = dtype_size(d);
    A2aGemm op(env.ctx(), {m, n, k, d, out_t, false});
    Bytes input = random_values(d, m * k, 17 + env.rank());
    Bytes weight = random_values(d, n * k, 91);
    Bytes bias = random_values(out_t, n, 5);
    Bytes a2a(m * k * esz), out(m * n * 4), ref(m * n * 4), scratch(m * k * esz);
    kernels::GemmWeight w;
    kernels::GemmOut go;
    go.c = ref.data();
    go.ldc = n;
    go.dtype = out_t;
    go.bias = bias.data();
    const int blk = static_cast<int>(m / W * k * esz);
    auto exchange = [&] {
      MPI_Alltoall(input.data(), blk, MPI_BYTE, a2a.data(), blk, MPI_BYTE, MPI_COMM_WORLD);
    };
    auto move = [&] {
      mpi_move(env, input.data(), static_cast<std::size_t>(blk), scratch.data(),
               static_cast<std::size_t>(blk));
    };
    auto gemm = [&] {
      w.prepare(d, weight.data(), n, k, false);
      kernels::gemm_rows(w, a2a.data(), k, m, go);
    };
    // The producer of the input writes it straight into the buffer (here: once, up front).
    std::memcpy(op.input_buffer(), input.data(), input.size());
    for (bool zero_copy : {false, true}) {
      auto in = [&] { return zero_copy ? op.input_buffer() : input.data(); };
      const std::vector<Stats> t = env.time_all({
          [&] { op.forward(in(), m, weight.data(), bias.data(), out.data()); },
          [&] {
            exchange();
            gemm();
          },
          [&] { op.forward_gemm_only(in(), m, weight.data(), bias.data(), out.data()); },
          [&] { op.forward_comm_only(in(), m, scratch.data()); },
          gemm,
          move,
      });
      op.forward(in(), m, weight.data(), bias.data(), out.data());
      exchange();
      gemm();
      fused_row(env, {"a2a_gemm", m, n, k, d, out_t, zero_copy}, t,
                count_wrong(out_t, out, ref, m * n, 1e-5 * k));
    }
  }
}

// Ulysses shapes: bs = 1, head_dim = 128, D = nheads · head_dim.
void bench_ulysses(Env& env) {
  const int W = env.world();
  const int64_t hd = 128;
  struct Shape {
    int64_t seq, D, other;  // other: hidden (before attention) or n (after)
  };
  std::vector<Shape> shapes = {{1024, 1024, 64},   {4096, 1024, 64},  {1024, 1024, 1024},
                               {4096, 1024, 1024}, {256, 4096, 4096}, {1024, 4096, 4096},
                               {4096, 4096, 4096}};
  // Link mode: exchanges of 4-8 MiB per rank behind a GEMM 1-3x their link time at 10 Gbit/s.
  if (env.settings().link) shapes = {{4096, 1024, 256}, {8192, 1024, 128}};
  const DType out_t = DType::kFloat32;
  for (int which = 0; which < 2; ++which) {
    const bool before = which == 0;
    fused_header(env,
                 before ? fmt::format("gemm_a2a_transpose (Ulysses, before attention), {} ranks on "
                                      "{} host(s): M = seq (bs 1), N = nheads*128, K = hidden",
                                      W, env.ctx().num_hosts())
                        : fmt::format("a2a_transpose_gemm (Ulysses, after attention), {} ranks on "
                                      "{} host(s): M = seq (bs 1), N = out features, K = "
                                      "nheads*128",
                                      W, env.ctx().num_hosts()),
                 "move");
    for (DType d : {DType::kFloat32, DType::kBFloat16})
      for (const Shape& s : shapes) {
        if (env.settings().link && env.settings().quick && d != DType::kFloat32) continue;
        const int64_t nheads = s.D / hd, rows = s.seq / W;
        if (nheads % W != 0) continue;
        const int64_t gn = before ? s.D : s.other, gk = before ? s.other : s.D;
        if (too_heavy(env, rows, gn, gk)) continue;
        if (env.settings().quick && !env.settings().link && s.seq != 1024) continue;
        const int64_t hl = nheads / W, C = hl * hd;
        const std::size_t esz = dtype_size(d);
        // The unfused path's exchanged dtype: y in the output dtype before, the input after.
        const std::size_t xsz = before ? 4 : esz;
        const std::size_t blk_row = C * xsz, blk = rows * blk_row;
        Bytes input = random_values(d, rows * (before ? s.other : W * C), 17 + env.rank());
        if (!before) input = random_values(d, hl * s.seq * hd, 17 + env.rank());
        Bytes weight = random_values(d, gn * gk, 91), bias = random_values(out_t, gn, 5);
        const std::size_t out_elems = before ? hl * s.seq * hd : rows * gn;
        Bytes out(out_elems * 4), ref(out_elems * 4), y(rows * s.D * xsz), send(W * blk),
            recv(W * blk);
        kernels::GemmWeight w;
        kernels::GemmOut go;
        go.ldc = gn;
        go.dtype = out_t;
        go.bias = bias.data();
        auto mpi = [&] {
          MPI_Alltoall(send.data(), static_cast<int>(blk), MPI_BYTE, recv.data(),
                       static_cast<int>(blk), MPI_BYTE, MPI_COMM_WORLD);
        };
        const std::size_t run = hd * xsz;
        std::function<void()> fused, unfused, gemm_only, comm_only, gemm;
        std::unique_ptr<GemmA2aTranspose> gat;
        std::unique_ptr<A2aTransposeGemm> atg;
        if (before) {
          gat = std::make_unique<GemmA2aTranspose>(
              env.ctx(), GemmA2aTransposeOptions{1, s.seq, s.other, nheads, hd, d, out_t});
          fused = [&] {
            gat->forward(input.data(), 1, s.seq, weight.data(), bias.data(), out.data());
          };
          gemm_only = [&] {
            gat->forward_gemm_only(input.data(), 1, s.seq, weight.data(), bias.data());
          };
          comm_only = [&] { gat->forward_comm_only(1, s.seq, out.data()); };
          gemm = [&] {
            w.prepare(d, weight.data(), gn, gk, false);
            go.c = y.data();
            kernels::gemm_rows(w, input.data(), gk, rows, go);
          };
          unfused = [&] {
            gemm();
            for (int t = 0; t < W; ++t)  // column group t, densely, for rank t
              for (int64_t i = 0; i < rows; ++i)
                std::memcpy(&send[t * blk + i * blk_row], &y[(i * s.D + t * C) * xsz], blk_row);
            mpi();
            for (int src = 0; src < W; ++src)  // [seq/W, C] of src -> [hl, seq, hd] at src's rows
              for (int64_t h = 0; h < hl; ++h)
                for (int64_t i = 0; i < rows; ++i)
                  std::memcpy(&ref[((h * s.seq) + src * rows + i) * run],
                              &recv[src * blk + i * blk_row + h * run], run);
          };
        } else {
          atg = std::make_unique<A2aTransposeGemm>(
              env.ctx(), A2aTransposeGemmOptions{1, s.seq, nheads, hd, s.other, d, out_t});
          fused = [&] {
            atg->forward(input.data(), 1, s.seq, weight.data(), bias.data(), out.data(), nullptr);
          };
          comm_only = [&] { atg->forward_comm_only(input.data(), 1, s.seq, nullptr); };
          gemm_only = [&] {
            atg->forward_gemm_only(1, s.seq, weight.data(), bias.data(), out.data());
          };
          unfused = [&] {
            for (int t = 0; t < W; ++t)  // rows t·seq/W.. of every local head, for rank t
              for (int64_t i = 0; i < rows; ++i)
                for (int64_t h = 0; h < hl; ++h)
                  std::memcpy(&send[t * blk + i * blk_row + h * run],
                              &input[((h * s.seq) + t * rows + i) * run], run);
            mpi();
            for (int src = 0; src < W; ++src)
              for (int64_t i = 0; i < rows; ++i)
                std::memcpy(&y[(i * s.D + src * C) * xsz], &recv[src * blk + i * blk_row], blk_row);
            gemm();
          };
          gemm = [&] {
            w.prepare(d, weight.data(), gn, gk, false);
            go.c = ref.data();
            kernels::gemm_rows(w, y.data(), gk, rows, go);
          };
        }
        auto move = [&] { mpi_move(env, send.data(), blk, recv.data(), blk); };
        const std::vector<Stats> t =
            env.time_all({fused, unfused, gemm_only, comm_only, gemm, move});
        fused();
        unfused();
        fused_row(env,
                  {before ? "gemm_a2a_transpose" : "a2a_transpose_gemm", s.seq, gn, gk, d, out_t},
                  t, count_wrong(out_t, out, ref, out_elems, 1e-5 * gk));
      }
  }
}

}  // namespace fluxcpp::bench
