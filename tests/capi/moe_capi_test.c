/* The local MoE entry points driven from C99: fluxcpp_moe_layout against a plain O(E*T*K) loop,
 * fluxcpp_grouped_gemm (f32 and f64, both weight layouts, per-group and NULL scale, an empty
 * group, m == 0) against per-group loops on exact values (multiples of 1/8, power-of-two scales:
 * compared bit for bit), and invalid arguments, after which the op stays usable.
 * Prints "moe_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

static int error_has(const char* needle) {
  return strstr(fluxcpp_last_error(), needle) != NULL;
}

/* ---- moe_layout ---------------------------------------------------------------------------- */

enum { T = 50, K = 3, E = 8, R = 4, L = E / R };

static void check_moe_layout(void) {
  int32_t ids[T * K];
  int64_t counts[E], rank_rows[R], rank_tokens[R];
  int32_t scatter[T * K], gather[T * K], topk[T * K];
  int64_t ref_counts[E], ref_rows[R], ref_tokens[R];
  int32_t ref_scatter[T * K], ref_gather[T * K], ref_topk[T * K];
  int64_t t, k, e, q, s, row = 0;
  fluxcpp_status_t st;

  seed_for(rank, 0, 7);
  for (s = 0; s < T * K; ++s) {
    const double v = next_value(); /* [-1, 1) */
    ids[s] = v < -0.75 ? -1 : (int32_t)((v + 0.75) / 1.75 * E) % E;
  }
  ids[3 * K + 1] = ids[3 * K]; /* a token naming one expert twice */

  /* The reference: for each expert, its slots in flat order. */
  for (s = 0; s < T * K; ++s) ref_scatter[s] = ref_gather[s] = ref_topk[s] = -1;
  for (q = 0; q < R; ++q) ref_rows[q] = ref_tokens[q] = 0;
  for (e = 0; e < E; ++e) {
    ref_counts[e] = 0;
    for (s = 0; s < T * K; ++s)
      if (ids[s] == e) {
        ref_scatter[s] = (int32_t)row;
        ref_gather[row] = (int32_t)(s / K);
        ref_topk[row] = (int32_t)(s % K);
        ++row;
        ++ref_counts[e];
        ++ref_rows[e / L];
      }
  }
  for (t = 0; t < T; ++t)
    for (q = 0; q < R; ++q) {
      int owned = 0;
      for (k = 0; k < K; ++k) owned |= ids[t * K + k] >= 0 && ids[t * K + k] / L == q;
      ref_tokens[q] += owned;
    }

  memset(scatter, 0x55, sizeof scatter);
  memset(gather, 0x55, sizeof gather);
  memset(topk, 0x55, sizeof topk);
  st = fluxcpp_moe_layout(ids, T, K, E, R, counts, rank_rows, rank_tokens, scatter, gather, topk);
  CHECK(st == FLUXCPP_SUCCESS, "moe_layout: %s", fluxcpp_last_error());
  CHECK(memcmp(counts, ref_counts, sizeof counts) == 0, "moe_layout expert_counts differ");
  CHECK(memcmp(rank_rows, ref_rows, sizeof rank_rows) == 0, "moe_layout rank_rows differ");
  CHECK(memcmp(rank_tokens, ref_tokens, sizeof rank_tokens) == 0, "moe_layout rank_tokens differ");
  CHECK(memcmp(scatter, ref_scatter, sizeof scatter) == 0, "moe_layout scatter_index differs");
  CHECK(memcmp(gather, ref_gather, sizeof gather) == 0, "moe_layout gather_index differs");
  CHECK(memcmp(topk, ref_topk, sizeof topk) == 0, "moe_layout topk_index differs");

  /* Only the required output. */
  st = fluxcpp_moe_layout(ids, T, K, E, R, counts, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_SUCCESS && memcmp(counts, ref_counts, sizeof counts) == 0,
        "moe_layout with NULL optional outputs: %s", fluxcpp_last_error());
  /* No tokens: NULL topk_ids is fine. */
  st = fluxcpp_moe_layout(NULL, 0, K, E, R, counts, rank_rows, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_SUCCESS && counts[0] == 0 && rank_rows[R - 1] == 0,
        "moe_layout with T = 0: %s", fluxcpp_last_error());

  /* Invalid arguments. */
  ids[4 * K + 2] = E;
  st = fluxcpp_moe_layout(ids, T, K, E, R, counts, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("moe_layout") &&
            error_has("topk_ids[t=4][k=2]=8"),
        "id out of range gave %d: %s", (int)st, fluxcpp_last_error());
  ids[4 * K + 2] = -1;
  st = fluxcpp_moe_layout(ids, T, K, E, 3, counts, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("num_ranks=3"),
        "E %% num_ranks gave %d: %s", (int)st, fluxcpp_last_error());
  st = fluxcpp_moe_layout(ids, T, K, E, R, NULL, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("expert_counts"),
        "NULL expert_counts gave %d: %s", (int)st, fluxcpp_last_error());
  st = fluxcpp_moe_layout(NULL, T, K, E, R, counts, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("topk_ids"), "NULL topk_ids gave %d: %s",
        (int)st, fluxcpp_last_error());
  st = fluxcpp_moe_layout(ids, T, 0, E, R, counts, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("topk=0"), "topk 0 gave %d: %s", (int)st,
        fluxcpp_last_error());
  st = fluxcpp_moe_layout(ids, INT64_MAX / 2, 4, E, R, counts, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("INT32_MAX"),
        "T*K > INT32_MAX gave %d: %s", (int)st, fluxcpp_last_error());
}

/* ---- grouped_gemm -------------------------------------------------------------------------- */

enum { G = 4, N = 9, KD = 13, MAX_M = 64 };

/* A multiple of 1/8 in [-1, 1]. */
static double eighth(void) {
  return (double)((int)((next_value() + 1.0) * 8.5) - 8) / 8.0;
}

static void check_grouped_gemm(fluxcpp_context_t ctx, fluxcpp_dtype_t dt, int trans) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  const size_t esz = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  int64_t splits[G] = {5, 0, 17, 3};
  const float scale[G] = {0.5f, 4.0f, 1.0f, 0.25f};
  const int64_t m = 25;
  void* in = malloc(esz * MAX_M * KD);
  void* w = malloc(esz * G * N * KD);
  void* out = malloc(esz * (MAX_M * N + 1));
  void* out2 = malloc(esz * (MAX_M * N + 1));
  void* ref = malloc(esz * MAX_M * N);
  int64_t i, j, c, g, row = 0;
  int use_scale;
  fluxcpp_status_t st;
  fluxcpp_grouped_gemm_t op = NULL;

  st = fluxcpp_grouped_gemm_create(ctx, G, MAX_M, N, KD, dt, dt, trans, &op);
  CHECK(st == FLUXCPP_SUCCESS && op != NULL, "%s grouped_gemm_create: %s", name,
        fluxcpp_last_error());
  if (op == NULL) return;
  seed_for(rank, trans, 11);
  for (i = 0; i < m * KD; ++i) store(in, dt, i, eighth());
  for (i = 0; i < G * N * KD; ++i) store(w, dt, i, eighth());

  for (use_scale = 0; use_scale < 2; ++use_scale) {
    row = 0;
    for (g = 0; g < G; ++g) {
      const double s = use_scale ? scale[g] : 1.0;
      for (i = row; i < row + splits[g]; ++i)
        for (j = 0; j < N; ++j) {
          double acc = 0.0;
          for (c = 0; c < KD; ++c)
            acc += load(in, dt, i * KD + c) *
                   load(w, dt, g * N * KD + (trans ? c * N + j : j * KD + c));
          store(ref, dt, i * N + j, s * acc); /* exact: no rounding anywhere */
        }
      row += splits[g];
    }
    memset(out, 0xFF, esz * (MAX_M * N + 1));
    st = fluxcpp_grouped_gemm_forward(op, in, splits, w, use_scale ? scale : NULL, out);
    CHECK(st == FLUXCPP_SUCCESS, "%s forward: %s", name, fluxcpp_last_error());
    CHECK(memcmp(out, ref, esz * (size_t)(m * N)) == 0,
          "%s transpose=%d scale=%d: output differs from the per-group loops", name, trans,
          use_scale);
    {
      const unsigned char* guard = (const unsigned char*)out + esz * (size_t)(m * N);
      size_t b = 0;
      while (b < esz && guard[b] == 0xFF) ++b;
      CHECK(b == esz, "%s: output written beyond m rows", name);
    }
  }

  /* m == 0 reads only splits. */
  {
    const int64_t zeros[G] = {0, 0, 0, 0};
    st = fluxcpp_grouped_gemm_forward(op, NULL, zeros, NULL, NULL, NULL);
    CHECK(st == FLUXCPP_SUCCESS, "%s m == 0: %s", name, fluxcpp_last_error());
  }
  /* Invalid arguments: INVALID_ARGUMENT naming grouped_gemm, nothing written. */
  memset(out2, 0xFF, esz * (MAX_M * N + 1));
  splits[1] = -2;
  st = fluxcpp_grouped_gemm_forward(op, in, splits, w, scale, out2);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("grouped_gemm: splits[1]=-2"),
        "%s negative split gave %d: %s", name, (int)st, fluxcpp_last_error());
  splits[1] = 40;
  st = fluxcpp_grouped_gemm_forward(op, in, splits, w, scale, out2);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("add up to 65 rows, more than max_m=64"),
        "%s sum > max_m gave %d: %s", name, (int)st, fluxcpp_last_error());
  splits[1] = 0;
  st = fluxcpp_grouped_gemm_forward(op, in, NULL, w, scale, out2);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("splits is NULL"),
        "%s NULL splits gave %d: %s", name, (int)st, fluxcpp_last_error());
  st = fluxcpp_grouped_gemm_forward(op, in, splits, NULL, scale, out2);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("weight is NULL"),
        "%s NULL weight gave %d: %s", name, (int)st, fluxcpp_last_error());
  {
    size_t b = 0;
    const unsigned char* o2 = (const unsigned char*)out2;
    while (b < esz * (MAX_M * N + 1) && o2[b] == 0xFF) ++b;
    CHECK(b == esz * (MAX_M * N + 1), "%s: a failed forward wrote output", name);
  }
  /* Still usable: the same bits as before (scaled). */
  st = fluxcpp_grouped_gemm_forward(op, in, splits, w, scale, out2);
  CHECK(st == FLUXCPP_SUCCESS && memcmp(out, out2, esz * (size_t)(m * N)) == 0,
        "%s forward after errors: %s", name, fluxcpp_last_error());

  CHECK(fluxcpp_grouped_gemm_destroy(op) == FLUXCPP_SUCCESS, "%s destroy", name);
  free(in), free(w), free(out), free(out2), free(ref);
}

static void check_grouped_gemm_create_errors(fluxcpp_context_t ctx) {
  fluxcpp_grouped_gemm_t op = (fluxcpp_grouped_gemm_t)1;
  fluxcpp_status_t st =
      fluxcpp_grouped_gemm_create(ctx, G, 8, 8, 8, FLUXCPP_BFLOAT16, FLUXCPP_FLOAT64, 0, &op);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && op == NULL && error_has("grouped_gemm"),
        "bf16 -> f64 gave %d: %s", (int)st, fluxcpp_last_error());
  st = fluxcpp_grouped_gemm_create(ctx, 0, 8, 8, 8, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, &op);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("num_groups=0"), "G = 0 gave %d: %s",
        (int)st, fluxcpp_last_error());
  st = fluxcpp_grouped_gemm_create(NULL, G, 8, 8, 8, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, &op);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("ctx"), "NULL ctx gave %d: %s", (int)st,
        fluxcpp_last_error());
  st = fluxcpp_grouped_gemm_create(ctx, G, 8, 8, 8, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT && error_has("out-pointer"),
        "NULL out-pointer gave %d: %s", (int)st, fluxcpp_last_error());
  st = fluxcpp_grouped_gemm_forward(NULL, NULL, NULL, NULL, NULL, NULL);
  CHECK(st == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle gave %d", (int)st);
  CHECK(fluxcpp_grouped_gemm_destroy(NULL) == FLUXCPP_SUCCESS, "destroy NULL");
}

int main(int argc, char** argv) {
  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  fluxcpp_context_t ctx = NULL;
  fluxcpp_status_t st;
  capi_init(&argc, &argv);

  check_moe_layout();

  cfg.timeout_s = 20.0;
  cfg.compute_threads = 2;
  st = fluxcpp_context_create(MPI_COMM_WORLD, &cfg, &ctx);
  CHECK(st == FLUXCPP_SUCCESS && ctx != NULL, "context_create: %s", fluxcpp_last_error());
  check_grouped_gemm(ctx, FLUXCPP_FLOAT32, 0);
  check_grouped_gemm(ctx, FLUXCPP_FLOAT32, 1);
  check_grouped_gemm(ctx, FLUXCPP_FLOAT64, 0);
  check_grouped_gemm(ctx, FLUXCPP_FLOAT64, 1);
  check_grouped_gemm_create_errors(ctx);
  return capi_end(ctx, "moe_capi");
}
