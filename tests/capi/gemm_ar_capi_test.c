/* The gemm_ar C ABI driven from C99: f32 and f64 forwards of small-integer patterns (exact in
 * any summation order) checked bit for bit against the closed-form sums over ranks, at odd m (1,
 * a middle one, max_m), with and without bias, both weight layouts, f32 also with a packed
 * weight; the output identical on every rank and from call to call, nothing written past [m, n];
 * invalid arguments (forward and create) and a NULL handle.
 * Prints "gemm_ar_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

/* Small integers: input in [-3, 3], weight in [-2, 2], bias in [-4, 4]. Every partial sum
 * (|.| <= 6 k W + 4 <= 1540 here) is an integer exact in f32 and f64, so any summation order
 * gives the same bits. */
static int64_t in_pattern(int s, int64_t i, int64_t l, int call) {
  return ((int64_t)s * 7 + i * 3 + l * 5 + (int64_t)call) % 7 - 3;
}
static int64_t w_pattern(int s, int64_t j, int64_t l, int call) {
  return ((int64_t)s * 5 + j * 2 + l * 3 + (int64_t)call * 11) % 5 - 2;
}
static int64_t bias_pattern(int64_t j, int call) {
  return (j * 3 + (int64_t)call) % 9 - 4;
}

/* The first element of out [m, n] that differs bitwise from want, or -1. */
static int64_t first_diff(const void* out, const void* want, size_t esz, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (memcmp((const char*)out + esz * (size_t)i, (const char*)want + esz * (size_t)i, esz) != 0)
      return i;
  return -1;
}

/* Whether every rank holds the same bytes. */
static int same_on_every_rank(const void* buf, size_t bytes) {
  unsigned char* all = malloc(bytes * (size_t)world + 1);
  MPI_Allgather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  int same = 1;
  for (int r = 1; r < world; ++r)
    if (memcmp(all, all + bytes * (size_t)r, bytes) != 0) same = 0;
  free(all);
  return same;
}

/* One op of dtype dt (input = output). For each m in {1, mid, max_m} and call (bias on call 0,
 * off on call 1): the forward against the closed-form sums bit for bit, the guard past [m, n]
 * untouched, the same bits on every rank and on a repeated forward, and (f32) the same bits from
 * a packed weight. Then the invalid-argument checks and a good forward after them. */
static void run_case(fluxcpp_context_t ctx, fluxcpp_dtype_t dt, int transpose_weight, int64_t max_m,
                     int64_t mid, int64_t n, int64_t k) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  const size_t esz = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  const int64_t guard = 8;
  const size_t in_bytes = esz * (size_t)(max_m * k), w_bytes = esz * (size_t)(n * k);
  const size_t out_cap = esz * (size_t)(max_m * n + guard);
  fluxcpp_gemm_ar_t op = NULL;
  fluxcpp_status_t s = fluxcpp_gemm_ar_create(ctx, max_m, n, k, dt, dt, transpose_weight, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s gemm_ar_create: %s", name, fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS || op == NULL) return; /* uniform: create fails on every rank */

  unsigned char* in = malloc(in_bytes);
  unsigned char* w = malloc(w_bytes);
  unsigned char* bias = malloc(esz * (size_t)n);
  unsigned char* out = malloc(out_cap);
  unsigned char* out2 = malloc(out_cap);
  unsigned char* want = malloc(out_cap);
  const int64_t ms[3] = {1, mid, max_m};
  int64_t last_m = 0;

  for (int mi = 0; mi < 3; ++mi) {
    const int64_t m = ms[mi];
    for (int call = 0; call < 2; ++call) {
      const int with_bias = call == 0;
      const void* b = with_bias ? bias : NULL;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t l = 0; l < k; ++l)
          store(in, dt, i * k + l, (double)in_pattern(rank, i, l, call));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l)
          store(w, dt, transpose_weight ? l * n + j : j * k + l,
                (double)w_pattern(rank, j, l, call));
      for (int64_t j = 0; j < n; ++j) store(bias, dt, j, (double)bias_pattern(j, call));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          int64_t sum = with_bias ? bias_pattern(j, call) : 0;
          for (int src = 0; src < world; ++src)
            for (int64_t l = 0; l < k; ++l)
              sum += in_pattern(src, i, l, call) * w_pattern(src, j, l, call);
          store(want, dt, i * n + j, (double)sum);
        }
      memset(out, 0xFF, out_cap); /* NaN: unwritten elements fail */

      s = fluxcpp_gemm_ar_forward(op, in, m, w, b, out);
      CHECK(s == FLUXCPP_SUCCESS, "%s forward m=%lld call %d: %s", name, (long long)m, call,
            fluxcpp_last_error());
      const int64_t bad = first_diff(out, want, esz, m * n);
      CHECK(bad < 0,
            "%s (transpose_weight=%d) m=%lld n=%lld k=%lld W=%d bias=%d: element (%lld, %lld): "
            "expected %.17g, got %.17g",
            name, transpose_weight, (long long)m, (long long)n, (long long)k, world, with_bias,
            (long long)(bad < 0 ? 0 : bad / n), (long long)(bad < 0 ? 0 : bad % n),
            bad < 0 ? 0.0 : load(want, dt, bad), bad < 0 ? 0.0 : load(out, dt, bad));
      CHECK(untouched(out, esz * (size_t)(m * n), out_cap, 0xFF),
            "%s m=%lld call %d: output written past [m, n]", name, (long long)m, call);
      CHECK(same_on_every_rank(out, esz * (size_t)(m * n)),
            "%s m=%lld call %d: output differs between ranks", name, (long long)m, call);

      /* The same forward again: the same bits. */
      memset(out2, 0xFF, out_cap);
      s = fluxcpp_gemm_ar_forward(op, in, m, w, b, out2);
      CHECK(s == FLUXCPP_SUCCESS, "%s repeated forward m=%lld call %d: %s", name, (long long)m,
            call, fluxcpp_last_error());
      CHECK(memcmp(out, out2, out_cap) == 0, "%s m=%lld call %d: repeated forward differs bitwise",
            name, (long long)m, call);

      /* A packed weight (f32): the same exact sums. */
      if (dt == FLUXCPP_FLOAT32) {
        fluxcpp_packed_weight_t pw = NULL;
        s = fluxcpp_packed_weight_create(ctx, dt, w, n, k, transpose_weight, &pw);
        CHECK(s == FLUXCPP_SUCCESS && pw != NULL, "%s packed_weight_create: %s", name,
              fluxcpp_last_error());
        memset(out2, 0xFF, out_cap);
        s = fluxcpp_gemm_ar_forward_packed(op, in, m, pw, b, out2);
        CHECK(s == FLUXCPP_SUCCESS, "%s forward_packed m=%lld call %d: %s", name, (long long)m,
              call, fluxcpp_last_error());
        CHECK(memcmp(out, out2, out_cap) == 0,
              "%s m=%lld call %d: packed weight gives other bits (first element differing: %lld)",
              name, (long long)m, call, (long long)first_diff(out2, want, esz, m * n));
        CHECK(fluxcpp_packed_weight_destroy(pw) == FLUXCPP_SUCCESS, "%s packed_weight_destroy",
              name);
      }
      last_m = m;
    }
  }

  /* Invalid arguments: every rank gets FLUXCPP_ERROR_INVALID_ARGUMENT naming gemm_ar. (The
   * buffers hold the last call's data: m = max_m, no bias.) */
  s = fluxcpp_gemm_ar_forward(op, in, max_m + 1, w, NULL, out);
  EXPECT_INVALID(s, "gemm_ar", "%s m > max_m", name);
  s = fluxcpp_gemm_ar_forward(op, in, -1, w, NULL, out);
  EXPECT_INVALID(s, "gemm_ar", "%s m = -1", name);
  if (world > 1) {
    s = fluxcpp_gemm_ar_forward(op, in, rank == world - 1 ? last_m : last_m - 1, w, NULL, out);
    EXPECT_INVALID(s, "gemm_ar", "%s different m across ranks", name);
    s = fluxcpp_gemm_ar_forward(op, in, rank == 0 ? max_m + 1 : last_m, w, NULL, out);
    EXPECT_INVALID(s, "gemm_ar", "%s m > max_m on rank 0 only", name);
    /* Rank 0's own check refused its call, which it still makes with a placeholder m = -1:
     * every rank reads its reason, never the placeholder; the refusal lasts one call. */
    if (rank == 0) fluxcpp_refuse_next_call("the caller's check: 20 rows, max_m=8");
    s = fluxcpp_gemm_ar_forward(op, rank == 0 ? NULL : in, rank == 0 ? -1 : last_m, w, NULL, out);
    EXPECT_INVALID(s, "gemm_ar: rank 0 refused its own arguments of this call: the caller's check",
                   "%s rank 0's refusal", name);
    CHECK(strstr(fluxcpp_last_error(), "=-1") == NULL, "%s a placeholder in: %s", name,
          fluxcpp_last_error());
    if (rank == 0) {
      fluxcpp_refuse_next_call("dropped by the next call");
      CHECK(fluxcpp_get_unique_id(NULL) == FLUXCPP_ERROR_INVALID_ARGUMENT, "%s NULL id", name);
    }
    s = fluxcpp_gemm_ar_forward(op, in, last_m, w, NULL, out);
    CHECK(s == FLUXCPP_SUCCESS, "%s forward after a dropped refusal: %s", name,
          fluxcpp_last_error());
  }
  s = fluxcpp_gemm_ar_forward(op, in, last_m, rank == world - 1 ? NULL : w, NULL, out);
  EXPECT_INVALID(s, "gemm_ar", "%s NULL weight on the last rank", name);
  s = fluxcpp_gemm_ar_forward(op, rank == 0 ? NULL : in, last_m, w, NULL, out);
  EXPECT_INVALID(s, "gemm_ar", "%s NULL input on rank 0", name);
  s = fluxcpp_gemm_ar_forward(op, in, last_m, w, NULL, rank == 0 ? NULL : out);
  EXPECT_INVALID(s, "gemm_ar", "%s NULL output on rank 0", name);
  s = fluxcpp_gemm_ar_forward_packed(op, in, last_m, NULL, NULL, out);
  EXPECT_INVALID(s, "gemm_ar", "%s NULL packed weight", name);
  s = fluxcpp_gemm_ar_forward(op, NULL, 0, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s m == 0 is a no-op: %s", name, fluxcpp_last_error());

  /* Still usable: a good forward gives the bits of the last good one. */
  memset(out2, 0xFF, out_cap);
  s = fluxcpp_gemm_ar_forward(op, in, last_m, w, NULL, out2);
  CHECK(s == FLUXCPP_SUCCESS, "%s forward after errors: %s", name, fluxcpp_last_error());
  CHECK(memcmp(out, out2, out_cap) == 0, "%s forward after errors differs bitwise", name);

  CHECK(fluxcpp_gemm_ar_destroy(op) == FLUXCPP_SUCCESS, "%s destroy: %s", name,
        fluxcpp_last_error());
  free(in), free(w), free(bias), free(out), free(out2), free(want);
}

/* An invalid create: FLUXCPP_ERROR_INVALID_ARGUMENT naming gemm_ar on every rank, and no op. */
static void bad_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n, int64_t k,
                       fluxcpp_dtype_t in, fluxcpp_dtype_t out, int transpose_weight,
                       const char* what) {
  fluxcpp_gemm_ar_t bad = NULL;
  fluxcpp_status_t s = fluxcpp_gemm_ar_create(ctx, max_m, n, k, in, out, transpose_weight, &bad);
  EXPECT_INVALID(s, "gemm_ar", "%s", what);
  CHECK(bad == NULL, "%s: create gave an op", what);
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);
  const fluxcpp_dtype_t f32 = FLUXCPP_FLOAT32;
  fluxcpp_status_t s;

  run_case(ctx, FLUXCPP_FLOAT32, 0, 67, 5, 13, 37);
  run_case(ctx, FLUXCPP_FLOAT32, 1, 9, 3, 17, 5);
  run_case(ctx, FLUXCPP_FLOAT64, 1, 33, 7, 11, 29);
  run_case(ctx, FLUXCPP_FLOAT64, 0, 5, 3, 9, 64);

  /* Invalid create arguments; the last three differ between ranks. */
  bad_create(ctx, 8, 8, 8, FLUXCPP_BFLOAT16, FLUXCPP_FLOAT64, 0, "bf16 -> f64");
  bad_create(ctx, 8, 8, 8, f32, FLUXCPP_BFLOAT16, 0, "f32 -> bf16");
  bad_create(ctx, 8, 0, 8, f32, f32, 0, "n = 0");
  bad_create(ctx, 8, 8, 0, f32, f32, 0, "k = 0");
  bad_create(ctx, -1, 8, 8, f32, f32, 0, "max_m = -1");
  s = fluxcpp_gemm_ar_create(ctx, 8, 8, 8, f32, f32, 0, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL out handle gave %d", (int)s);
  if (world > 1) {
    bad_create(ctx, 8, 8, rank == 0 ? 9 : 8, f32, f32, 0, "k differing");
    bad_create(ctx, 8, 8, 8, f32, f32, rank == world - 1, "transpose differing");
    bad_create(ctx, rank == 0 ? 8 : 9, 8, 8, f32, f32, 0, "max_m differing");
  }
  s = fluxcpp_gemm_ar_forward(NULL, NULL, 0, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle gave %d", (int)s);
  s = fluxcpp_gemm_ar_forward_packed(NULL, NULL, 0, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle (forward_packed) gave %d", (int)s);
  CHECK(fluxcpp_gemm_ar_destroy(NULL) == FLUXCPP_SUCCESS, "destroy NULL");

  return capi_end(ctx, "gemm_ar_capi");
}
