/* The gemm_rs C ABI driven from C99: f32 and f64 forwards (with and without bias, both weight
 * layouts) against MPI_Allgather of every rank's input and weight plus a naive loop, bitwise
 * repeatability, and invalid arguments.
 * Prints "gemm_rs_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

/* One op of dtype dt (input = output), rows per rank `rows`; forwards with and without bias
 * against the naive reference, a repeated forward bit for bit, then the invalid-argument checks
 * and a good forward after them. */
static void run_case(fluxcpp_context_t ctx, fluxcpp_dtype_t dt, int transpose_weight, int64_t rows,
                     int64_t n, int64_t k) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  const size_t esz = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  const int64_t m = rows * world;
  const double eps = dt == FLUXCPP_FLOAT32 ? 1.0 / 1048576.0 /* 2^-20 */
                                           : 1.0 / 281474976710656.0 /* 2^-48 */;
  const size_t in_bytes = esz * (size_t)(m * k), w_bytes = esz * (size_t)(n * k);
  const size_t out_bytes = esz * (size_t)(rows * n);
  fluxcpp_gemm_rs_t op = NULL;
  fluxcpp_status_t s = fluxcpp_gemm_rs_create(ctx, m, n, k, dt, dt, transpose_weight, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s gemm_rs_create: %s", name, fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS || op == NULL) return; /* uniform: create fails on every rank */

  void* in = malloc(in_bytes);
  void* w = malloc(w_bytes);
  void* bias = malloc(esz * (size_t)n);
  void* out = malloc(out_bytes + esz); /* one guard element */
  void* out2 = malloc(out_bytes + esz);
  void* all_in = malloc(in_bytes * (size_t)world);
  void* all_w = malloc(w_bytes * (size_t)world);

  for (int call = 0; call < 2; ++call) {
    const int with_bias = call == 0;
    seed_for(rank, call, 1); /* this rank's K slice of the input: [m, k] */
    for (int64_t i = 0; i < m * k; ++i) store(in, dt, i, next_value());
    seed_for(rank, call, 2); /* this rank's own weight */
    for (int64_t i = 0; i < n * k; ++i) store(w, dt, i, next_value());
    seed_for(0, call, 3); /* the bias is the same on every rank */
    for (int64_t j = 0; j < n; ++j) store(bias, dt, j, next_value());
    memset(out, 0xFF, out_bytes + esz); /* NaN: unwritten elements fail */

    s = fluxcpp_gemm_rs_forward(op, in, m, w, with_bias ? bias : NULL, out);
    CHECK(s == FLUXCPP_SUCCESS, "%s forward call %d: %s", name, call, fluxcpp_last_error());
    MPI_Allgather(in, (int)in_bytes, MPI_BYTE, all_in, (int)in_bytes, MPI_BYTE, MPI_COMM_WORLD);
    MPI_Allgather(w, (int)w_bytes, MPI_BYTE, all_w, (int)w_bytes, MPI_BYTE, MPI_COMM_WORLD);

    /* Naive reference in double over every rank's partial; tolerance
     * eps * (k*W + 2) * (sum |a||b| + |bias|). */
    int bad = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = rank * rows + i; /* global row of this rank's block */
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0, mag = 0.0;
        for (int src = 0; src < world; ++src) {
          const char* a_s = (const char*)all_in + (size_t)src * in_bytes;
          const char* w_s = (const char*)all_w + (size_t)src * w_bytes;
          for (int64_t l = 0; l < k; ++l) {
            double a = load(a_s, dt, row * k + l);
            double b = load(w_s, dt, transpose_weight ? l * n + j : j * k + l);
            acc += a * b;
            mag += absd(a * b);
          }
        }
        if (with_bias) {
          acc += load(bias, dt, j);
          mag += absd(load(bias, dt, j));
        }
        double got = load(out, dt, i * n + j);
        double tol = eps * (double)(k * world + 2) * mag + 1e-30;
        if (!(absd(got - acc) <= tol)) {
          if (bad < 4)
            fprintf(stderr, "[rank %d] %s call %d: row %lld col %lld: expected %.10g, got %.10g\n",
                    rank, name, call, (long long)row, (long long)j, acc, got);
          ++bad;
        }
      }
    }
    CHECK(bad == 0, "%s call %d (transpose_weight=%d): %d of %lld elements out of tolerance", name,
          call, transpose_weight, bad, (long long)(rows * n));
    CHECK(untouched(out, out_bytes, out_bytes + esz, 0xFF),
          "%s call %d: output written beyond this rank's block", name, call);

    /* The same forward again: the same bits. */
    memset(out2, 0xFF, out_bytes + esz);
    s = fluxcpp_gemm_rs_forward(op, in, m, w, with_bias ? bias : NULL, out2);
    CHECK(s == FLUXCPP_SUCCESS, "%s repeated forward call %d: %s", name, call,
          fluxcpp_last_error());
    CHECK(memcmp(out, out2, out_bytes) == 0, "%s call %d: repeated forward differs bitwise", name,
          call);
  }

  /* Invalid arguments: every rank gets FLUXCPP_ERROR_INVALID_ARGUMENT naming gemm_rs. */
  s = fluxcpp_gemm_rs_forward(op, in, m + world, w, bias, out);
  EXPECT_INVALID(s, "gemm_rs", "%s m > max_m", name);
  if (world > 1) {
    s = fluxcpp_gemm_rs_forward(op, in, world + 1 <= m ? world + 1 : 1, w, bias, out);
    EXPECT_INVALID(s, "gemm_rs", "%s m %% W != 0", name);
    s = fluxcpp_gemm_rs_forward(op, in, rank == world - 1 ? m : world, w, bias, out);
    EXPECT_INVALID(s, "gemm_rs", "%s different m across ranks", name);
  }
  s = fluxcpp_gemm_rs_forward(op, in, m, rank == world - 1 ? NULL : w, bias, out);
  EXPECT_INVALID(s, "gemm_rs", "%s NULL weight on the last rank", name);
  s = fluxcpp_gemm_rs_forward(op, rank == 0 ? NULL : in, m, w, bias, out);
  EXPECT_INVALID(s, "gemm_rs", "%s NULL input on rank 0", name);
  s = fluxcpp_gemm_rs_forward(op, in, m, w, bias, rank == 0 ? NULL : out);
  EXPECT_INVALID(s, "gemm_rs", "%s NULL output on rank 0", name);
  s = fluxcpp_gemm_rs_forward(op, NULL, 0, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s m == 0 is a no-op: %s", name, fluxcpp_last_error());

  /* Still usable: a good forward gives the bits of the last good one (same data, with bias
   * off as in the last call). */
  memset(out2, 0xFF, out_bytes + esz);
  s = fluxcpp_gemm_rs_forward(op, in, m, w, NULL, out2);
  CHECK(s == FLUXCPP_SUCCESS, "%s forward after errors: %s", name, fluxcpp_last_error());
  CHECK(memcmp(out, out2, out_bytes) == 0, "%s forward after errors differs bitwise", name);

  CHECK(fluxcpp_gemm_rs_destroy(op) == FLUXCPP_SUCCESS, "%s destroy: %s", name,
        fluxcpp_last_error());
  free(in), free(w), free(bias), free(out), free(out2), free(all_in), free(all_w);
}

/* An invalid create (max_m = 4 W): FLUXCPP_ERROR_INVALID_ARGUMENT naming gemm_rs on every rank,
 * and no op. */
static void bad_create(fluxcpp_context_t ctx, int64_t n, int64_t k, fluxcpp_dtype_t in,
                       fluxcpp_dtype_t out, int transpose_weight, const char* what) {
  fluxcpp_gemm_rs_t bad = NULL;
  fluxcpp_status_t s =
      fluxcpp_gemm_rs_create(ctx, 4 * world, n, k, in, out, transpose_weight, &bad);
  EXPECT_INVALID(s, "gemm_rs", "%s", what);
  CHECK(bad == NULL, "%s: create gave an op", what);
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);
  const fluxcpp_dtype_t f32 = FLUXCPP_FLOAT32;
  fluxcpp_status_t s;

  run_case(ctx, FLUXCPP_FLOAT32, 0, 7, 13, 37);
  run_case(ctx, FLUXCPP_FLOAT32, 1, 3, 17, 5);
  run_case(ctx, FLUXCPP_FLOAT64, 1, 5, 11, 29);
  run_case(ctx, FLUXCPP_FLOAT64, 0, 2, 9, 64);

  /* Invalid create arguments; the last two differ between ranks. */
  bad_create(ctx, 8, 8, FLUXCPP_BFLOAT16, FLUXCPP_FLOAT64, 0, "bf16 -> f64");
  bad_create(ctx, 8, 8, f32, FLUXCPP_BFLOAT16, 0, "f32 -> bf16");
  bad_create(ctx, 0, 8, f32, f32, 0, "n = 0");
  bad_create(ctx, 8, 0, f32, f32, 0, "k = 0");
  if (world > 1) {
    bad_create(ctx, 8, rank == 0 ? 9 : 8, f32, f32, 0, "k differing");
    bad_create(ctx, 8, 8, f32, f32, rank == world - 1, "transpose differing");
  }
  s = fluxcpp_gemm_rs_forward(NULL, NULL, 0, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle gave %d", (int)s);
  CHECK(fluxcpp_gemm_rs_destroy(NULL) == FLUXCPP_SUCCESS, "destroy NULL");

  return capi_end(ctx, "gemm_rs_capi");
}
