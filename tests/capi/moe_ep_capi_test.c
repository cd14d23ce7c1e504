/* The expert-parallel MoE entry points driven from C99: fluxcpp_moe_dispatch against a plain loop
 * over every rank's routing (each rank can build every rank's table and input), then
 * fluxcpp_moe_combine of the received rows, with and without weights (exact values: compared
 * bit for bit with x * sum of weights); overflow (counts still written, recv untouched), a
 * num_rows mismatch and a NULL num_recv_rows fail on every rank, after which the ops stay usable.
 * Prints "moe_ep_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

enum { MAXT = 12, K = 2, H = 6 };

static int error_has(const char* needle) {
  return strstr(fluxcpp_last_error(), needle) != NULL;
}

/* Rank s's routing and input for call c: T_s tokens, ids in [-1, E), weights multiples of 1/8. */
static int64_t tokens_of(int s, int c) {
  return (s + c) % 3 == 0 && s == 0 ? 0 : MAXT - (s * 5 + c) % 4;
}
static int32_t id_of(int s, int c, int64_t t, int64_t k, int64_t E) {
  const int64_t v = (s * 131 + c * 17 + t * 7 + k * 3) % (E + 1);
  if (k == 1 && t % 4 == 1) return id_of(s, c, t, 0, E); /* duplicate expert */
  return v == E ? -1 : (int32_t)v;
}
static float weight_of(int s, int64_t t, int64_t k) {
  return (float)(1 + (s + t + k) % 8) / 8.0f;
}
static float value_of(int s, int64_t t, int64_t h) {
  return (float)(s * 64 + t * 4 + h) / 4.0f;
}

static void run_calls(fluxcpp_context_t ctx, int64_t E) {
  const int64_t L = E / world, cap = (int64_t)world * MAXT * K;
  fluxcpp_moe_dispatch_t d = NULL;
  fluxcpp_moe_combine_t cb = NULL;
  float *recv = malloc(sizeof(float) * cap * H), *rw = malloc(sizeof(float) * cap);
  int32_t* src = malloc(sizeof(int32_t) * cap * 3);
  int64_t* counts = malloc(sizeof(int64_t) * L);
  float x[MAXT * H], w[MAXT * K], out[MAXT * H];
  int32_t ids[MAXT * K];
  int c;
  CHECK(fluxcpp_moe_dispatch_create(ctx, MAXT, H, K, E, 0, FLUXCPP_FLOAT32, &d) == FLUXCPP_SUCCESS,
        "dispatch create: %s", fluxcpp_last_error());
  CHECK(fluxcpp_moe_combine_create(ctx, MAXT, H, K, E, 0, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, &cb) ==
            FLUXCPP_SUCCESS,
        "combine create: %s", fluxcpp_last_error());
  for (c = 0; c < 6 && d != NULL && cb != NULL; ++c) {
    const int64_t T = tokens_of(rank, c);
    int64_t t, k, h, l, R = -1, row = 0, bad = 0;
    int s;
    const int weighted = c % 2;
    for (t = 0; t < T; ++t) {
      for (h = 0; h < H; ++h) x[t * H + h] = value_of(rank, t, h);
      for (k = 0; k < K; ++k) {
        ids[t * K + k] = id_of(rank, c, t, k, E);
        w[t * K + k] = weight_of(rank, t, k);
      }
    }
    CHECK(
        fluxcpp_moe_dispatch_forward(d, x, T, ids, w, recv, rw, src, counts, &R) == FLUXCPP_SUCCESS,
        "dispatch forward (E %lld, call %d): %s", (long long)E, c, fluxcpp_last_error());
    /* The expected order: (local expert, source, token, k). */
    for (l = 0; l < L; ++l) {
      int64_t n = 0;
      for (s = 0; s < world; ++s)
        for (t = 0; t < tokens_of(s, c); ++t)
          for (k = 0; k < K; ++k) {
            if (id_of(s, c, t, k, E) != rank * L + l) continue;
            ++n;
            for (h = 0; h < H; ++h) bad += recv[row * H + h] != value_of(s, t, h);
            bad += rw[row] != weight_of(s, t, k);
            bad += src[3 * row] != s || src[3 * row + 1] != t || src[3 * row + 2] != k;
            ++row;
          }
      bad += counts[l] != n;
    }
    CHECK(R == row && bad == 0, "dispatch (E %lld, call %d): R %lld, expected %lld, %lld wrong",
          (long long)E, c, (long long)R, (long long)row, (long long)bad);
    CHECK(fluxcpp_moe_combine_forward(cb, recv, R, T, ids, weighted ? w : NULL, out) ==
              FLUXCPP_SUCCESS,
          "combine forward: %s", fluxcpp_last_error());
    bad = 0;
    for (t = 0; t < T; ++t) {
      float scale = 0.0f;
      for (k = 0; k < K; ++k)
        if (ids[t * K + k] >= 0) scale += weighted ? w[t * K + k] : 1.0f;
      for (h = 0; h < H; ++h) bad += out[t * H + h] != x[t * H + h] * scale;
    }
    CHECK(bad == 0, "combine (E %lld, call %d, weighted %d): %lld wrong", (long long)E, c, weighted,
          (long long)bad);
  }
  /* Bad input on one rank: every rank fails, the ops stay usable. */
  if (d != NULL && cb != NULL) {
    const int64_t T = tokens_of(rank, 0);
    int64_t R = -1, t, k;
    for (t = 0; t < T; ++t)
      for (k = 0; k < K; ++k) ids[t * K + k] = id_of(rank, 0, t, k, E);
    CHECK(fluxcpp_moe_dispatch_forward(d, x, T, ids, NULL, recv, NULL, NULL, counts,
                                       rank == world - 1 ? NULL : &R) ==
                  FLUXCPP_ERROR_INVALID_ARGUMENT &&
              error_has("num_recv_rows"),
          "NULL num_recv_rows: %s", fluxcpp_last_error());
    CHECK(fluxcpp_moe_dispatch_forward(d, x, T, ids, NULL, recv, NULL, NULL, counts, &R) ==
              FLUXCPP_SUCCESS,
          "dispatch after an error: %s", fluxcpp_last_error());
    CHECK(fluxcpp_moe_combine_forward(cb, recv, rank == 0 ? R + 1 : R, T, ids, NULL, out) ==
                  FLUXCPP_ERROR_INVALID_ARGUMENT &&
              error_has("num_rows"),
          "num_rows mismatch: %s", fluxcpp_last_error());
    CHECK(fluxcpp_moe_combine_forward(cb, recv, R, T, ids, NULL, out) == FLUXCPP_SUCCESS,
          "combine after an error: %s", fluxcpp_last_error());
  }
  CHECK(fluxcpp_moe_dispatch_destroy(d) == FLUXCPP_SUCCESS, "dispatch destroy");
  CHECK(fluxcpp_moe_combine_destroy(cb) == FLUXCPP_SUCCESS, "combine destroy");
  free(recv);
  free(rw);
  free(src);
  free(counts);
}

/* Capacity 1: any rank receiving two rows overflows; counts are written, recv is untouched. */
static void check_overflow(fluxcpp_context_t ctx) {
  fluxcpp_moe_dispatch_t d = NULL;
  float x[2 * H], recv[H];
  int32_t ids[2 * K];
  int64_t counts[1] = {-1}, R = -1;
  int i;
  CHECK(fluxcpp_moe_dispatch_create(ctx, 2, H, K, world, 1, FLUXCPP_FLOAT32, &d) == FLUXCPP_SUCCESS,
        "create: %s", fluxcpp_last_error());
  if (d == NULL) return;
  for (i = 0; i < 2 * H; ++i) x[i] = 1.0f;
  for (i = 0; i < H; ++i) recv[i] = -5.0f;
  for (i = 0; i < 2 * K; ++i) ids[i] = 0; /* all to expert 0 on rank 0 */
  CHECK(fluxcpp_moe_dispatch_forward(d, x, 2, ids, NULL, recv, NULL, NULL, counts, &R) ==
                FLUXCPP_ERROR_INVALID_ARGUMENT &&
            error_has("rank 0") && error_has("max_recv_rows=1"),
        "overflow: %s", fluxcpp_last_error());
  CHECK(R == (rank == 0 ? 4 * world : 0) && counts[0] == R, "overflow counts: R %lld, counts %lld",
        (long long)R, (long long)counts[0]);
  for (i = 0; i < H; ++i) CHECK(recv[i] == -5.0f, "recv written on overflow");
  for (i = 0; i < 2 * K; ++i) ids[i] = -1;
  ids[0] = rank;
  CHECK(fluxcpp_moe_dispatch_forward(d, x, 2, ids, NULL, recv, NULL, NULL, counts, &R) ==
                FLUXCPP_SUCCESS &&
            R == 1 && recv[0] == 1.0f,
        "after overflow: %s", fluxcpp_last_error());
  fluxcpp_moe_dispatch_destroy(d);
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = NULL;
  capi_init(&argc, &argv);
  CHECK(fluxcpp_context_create(MPI_COMM_WORLD, NULL, &ctx) == FLUXCPP_SUCCESS, "context: %s",
        fluxcpp_last_error());
  if (ctx != NULL) {
    run_calls(ctx, world);
    run_calls(ctx, 4 * world);
    check_overflow(ctx);
    CHECK(fluxcpp_context_destroy(ctx) == FLUXCPP_SUCCESS, "context destroy");
  }
  return capi_finish("moe_ep_capi");
}
