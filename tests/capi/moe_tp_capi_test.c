/* The tensor-parallel MoE ops driven from C99: fluxcpp_ag_scatter_grouped_gemm (layer 0) and
 * fluxcpp_grouped_gemm_gather_rs (layer 1), f32 and f64, ep_size 1 and W, both weight layouts,
 * against plain loops on exact values (multiples of 1/8: every sum is exact in any order, so the
 * outputs are compared bit for bit). Every rank regenerates every rank's tensors from its seed,
 * so the references need no communication. Then routings that differ between ranks and a bad
 * scatter_index: INVALID_ARGUMENT on every rank, after which the ops stay usable.
 * Prints "moe_tp_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

enum { K = 2, H = 24, F = 16, PER = 5 };

static double eighth(void) { /* a multiple of 1/8 in [-1, 1] */
  return (double)((int)((next_value() + 1.0) * 8.5) - 8) / 8.0;
}

/* Rank s's tokens [PER, H]. */
static void tokens_of(int s, double* x) {
  int i;
  seed_for(s, 1, 1);
  for (i = 0; i < PER * H; ++i) x[i] = eighth();
}

/* Rank s's weight element (l, i) of an expert slab of H*F, generated per rank. */
static void weights_of(int s, int64_t L, double* w) {
  int64_t i;
  seed_for(s, 2, 2);
  for (i = 0; i < L * H * F; ++i) w[i] = eighth();
}

/* w [L, rows, cols] into wt in dtype dt, each expert's slab as is or, transposed, as
 * [cols, rows]. */
static void store_slabs(void* wt, fluxcpp_dtype_t dt, const double* w, int64_t L, int64_t rows,
                        int64_t cols, int trans) {
  int64_t l, r, c;
  for (l = 0; l < L; ++l)
    for (r = 0; r < rows; ++r)
      for (c = 0; c < cols; ++c)
        store(wt, dt, l * rows * cols + (trans ? c * rows + r : r * cols + c),
              w[l * rows * cols + r * cols + c]);
}

static int error_has(const char* needle) {
  return strstr(fluxcpp_last_error(), needle) != NULL;
}

static void run(fluxcpp_context_t ctx, fluxcpp_dtype_t dt, int64_t ep, int trans) {
  const int64_t W = world, T = PER * W, E = 2 * W, L = E / ep, tp = W / ep, q = rank / tp;
  const size_t es = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  int32_t ids[PER * 64 * K], scatter[PER * 64 * K], gather[PER * 64 * K];
  int64_t splits[128], P[129], b, Mr, bs[64], Ms[64];
  double* x = malloc(sizeof(double) * (size_t)(T * H));
  double* w0 = malloc(sizeof(double) * (size_t)(L * H * F));
  double* wall = malloc(sizeof(double) * (size_t)(W * L * H * F));
  void* in = malloc(es * PER * H);
  void* wt = malloc(es * (size_t)(L * H * F));
  void* out0 = malloc(es * (size_t)(T * K * F) + 8);
  void* out1 = malloc(es * PER * H);
  fluxcpp_ag_scatter_grouped_gemm_t l0 = NULL;
  fluxcpp_grouped_gemm_gather_rs_t l1 = NULL;
  int64_t i, j, t, k, e, c, h, s, l, bad = 0;
  fluxcpp_status_t st;

  for (t = 0; t < T; ++t)
    for (k = 0; k < K; ++k) ids[t * K + k] = (t + k) % 5 == 4 ? -1 : (int32_t)((t * 3 + k) % E);
  st = fluxcpp_moe_layout(ids, T, K, E, 1, splits, NULL, NULL, scatter, gather, NULL);
  CHECK(st == FLUXCPP_SUCCESS, "moe_layout: %s", fluxcpp_last_error());
  P[0] = 0;
  for (e = 0; e < E; ++e) P[e + 1] = P[e] + splits[e];
  for (s = 0; s < W; ++s) {
    bs[s] = P[(s / tp) * L];
    Ms[s] = P[(s / tp + 1) * L] - bs[s];
  }
  b = bs[rank];
  Mr = Ms[rank];
  for (s = 0; s < W; ++s) tokens_of((int)s, x + s * PER * H);
  for (s = 0; s < W; ++s) weights_of((int)s, L, wall + s * L * H * F);
  memcpy(w0, wall + rank * L * H * F, sizeof(double) * (size_t)(L * H * F));
  for (i = 0; i < PER * H; ++i) store(in, dt, i, x[rank * PER * H + i]);

  /* Layer 0: weight [L, F, H] ([L, H, F] when transposed); output [Mr, F]. */
  store_slabs(wt, dt, w0, L, F, H, trans);
  st = fluxcpp_ag_scatter_grouped_gemm_create(ctx, T, H, F, K, E, ep, dt, dt, trans, &l0);
  CHECK(st == FLUXCPP_SUCCESS, "l0 create: %s", fluxcpp_last_error());
  st = fluxcpp_ag_scatter_grouped_gemm_forward(l0, in, T, splits, scatter, wt, NULL, out0, NULL);
  CHECK(st == FLUXCPP_SUCCESS, "l0 forward: %s", fluxcpp_last_error());
  for (j = b; j < b + Mr; ++j) {
    for (l = 0; l < L && P[q * L + l + 1] <= j; ++l) {
    }
    for (c = 0; c < F; ++c) {
      double acc = 0;
      for (h = 0; h < H; ++h) acc += x[gather[j] * H + h] * w0[l * H * F + c * H + h];
      if (load(out0, dt, (j - b) * F + c) != acc) ++bad;
    }
  }
  CHECK(bad == 0, "l0 dt=%d ep=%d trans=%d: %d elements differ", (int)dt, (int)ep, trans, (int)bad);

  /* Layer 1: rank s's input [Ms, F] = its rows of x's first F columns; weight [L, H, F]
   * ([L, F, H] when transposed); output [PER, H] = sum over s and k of Y_s(j). */
  for (i = 0; i < Mr * F; ++i) store(out0, dt, i, x[gather[b + i / F] * H + i % F]);
  store_slabs(wt, dt, w0, L, H, F, trans);
  st = fluxcpp_grouped_gemm_gather_rs_create(ctx, T, H, F, K, E, ep, dt, dt, trans, &l1);
  CHECK(st == FLUXCPP_SUCCESS, "l1 create: %s", fluxcpp_last_error());
  st = fluxcpp_grouped_gemm_gather_rs_forward(l1, out0, T, splits, scatter, wt, NULL, out1);
  CHECK(st == FLUXCPP_SUCCESS, "l1 forward: %s", fluxcpp_last_error());
  bad = 0;
  for (t = rank * PER; t < (rank + 1) * PER; ++t)
    for (h = 0; h < H; ++h) {
      double acc = 0;
      for (s = 0; s < W; ++s)
        for (k = 0; k < K; ++k) {
          const int64_t jj = scatter[t * K + k];
          if (jj < bs[s] || jj >= bs[s] + Ms[s]) continue;
          for (l = 0; P[(s / tp) * L + l + 1] <= jj; ++l) {
          }
          for (c = 0; c < F; ++c) acc += x[t * H + c] * wall[s * L * H * F + l * H * F + h * F + c];
        }
      if (load(out1, dt, (t - rank * PER) * H + h) != acc) ++bad;
    }
  CHECK(bad == 0, "l1 dt=%d ep=%d trans=%d: %d elements differ", (int)dt, (int)ep, trans, (int)bad);

  /* Disagreeing splits (W > 1) and a scatter_index naming a row twice: every rank fails. */
  if (W > 1) {
    int64_t other[128];
    memcpy(other, splits, sizeof(int64_t) * (size_t)E);
    if (rank == W - 1) {
      other[0] += 1;
      other[1] -= 1;
    }
    if (splits[1] > 0) {
      st = fluxcpp_ag_scatter_grouped_gemm_forward(l0, in, T, other, scatter, wt, NULL, out0, NULL);
      CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("routing"),
            "l0 disagreeing splits: %d %s", (int)st, fluxcpp_last_error());
      st = fluxcpp_grouped_gemm_gather_rs_forward(l1, out0, T, other, scatter, wt, NULL, out1);
      CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("routing"),
            "l1 disagreeing splits: %d %s", (int)st, fluxcpp_last_error());
    }
  }
  {
    int32_t dup[PER * 64 * K];
    memcpy(dup, scatter, sizeof(int32_t) * (size_t)(T * K));
    if (rank == 0) dup[0] = dup[1] >= 0 ? dup[1] : 0;
    if (scatter[0] >= 0 && scatter[1] >= 0) {
      st = fluxcpp_ag_scatter_grouped_gemm_forward(l0, in, T, splits, dup, wt, NULL, out0, NULL);
      CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("ag_scatter_grouped_gemm"),
            "l0 duplicate row: %d %s", (int)st, fluxcpp_last_error());
    }
  }
  st = fluxcpp_ag_scatter_grouped_gemm_forward(l0, in, T, splits, scatter, wt, NULL, out0, NULL);
  CHECK(st == FLUXCPP_SUCCESS, "l0 usable after errors: %s", fluxcpp_last_error());
  CHECK(fluxcpp_ag_scatter_grouped_gemm_destroy(l0) == FLUXCPP_SUCCESS, "l0 destroy");
  CHECK(fluxcpp_grouped_gemm_gather_rs_destroy(l1) == FLUXCPP_SUCCESS, "l1 destroy");
  free(x), free(w0), free(wall), free(in), free(wt), free(out0), free(out1);
}

int main(int argc, char** argv) {
  fluxcpp_context_config_t cfg;
  fluxcpp_context_t ctx = NULL;
  capi_init(&argc, &argv);
  cfg = capi_config();
  cfg.timeout_s = 30.0;
  if (fluxcpp_context_create(MPI_COMM_WORLD, &cfg, &ctx) != FLUXCPP_SUCCESS) {
    fprintf(stderr, "[rank %d] context_create: %s\n", rank, fluxcpp_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  run(ctx, FLUXCPP_FLOAT32, 1, 0);
  run(ctx, FLUXCPP_FLOAT64, 1, 1);
  if (world > 1) {
    run(ctx, FLUXCPP_FLOAT32, world, 1);
    run(ctx, FLUXCPP_FLOAT64, world, 0);
  }
  return capi_end(ctx, "moe_tp_capi");
}
