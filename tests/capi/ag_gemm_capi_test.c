/* The ag_gemm C ABI driven from C99: f32 and f64 forwards (bias, gathered_input, both weight
 * layouts; f32 also with a packed weight) against MPI_Allgather plus a naive triple loop, and
 * invalid arguments.
 * Prints "ag_gemm_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

/* One op of dtype dt (input = output), rows per rank `rows`; two forwards (with bias and
 * gathered_input, then without either) and the invalid-argument checks. */
static void run_case(fluxcpp_context_t ctx, fluxcpp_dtype_t dt, int transpose_weight, int64_t rows,
                     int64_t n, int64_t k) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  const size_t esz = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  const int64_t m = rows * world;
  const double eps = dt == FLUXCPP_FLOAT32 ? 1.0 / 1048576.0 /* 2^-20 */
                                           : 1.0 / 281474976710656.0 /* 2^-48 */;
  fluxcpp_ag_gemm_t op = NULL;
  fluxcpp_status_t s = fluxcpp_ag_gemm_create(ctx, m, n, k, dt, dt, transpose_weight, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s ag_gemm_create: %s", name, fluxcpp_last_error());

  void* in = malloc(esz * (size_t)(rows * k));
  void* w = malloc(esz * (size_t)(n * k));
  void* bias = malloc(esz * (size_t)n);
  void* out = malloc(esz * (size_t)(m * n));
  void* gathered = malloc(esz * (size_t)(m * k));
  void* ref_gathered = malloc(esz * (size_t)(m * k));

  /* Call 2 (f32): the weight packed, through fluxcpp_ag_gemm_forward_packed. */
  const int calls = dt == FLUXCPP_FLOAT32 ? 3 : 2;
  for (int call = 0; call < calls; ++call) {
    const int with_extras = call != 1; /* bias and gathered_input but on the second call */
    seed_for(rank, call, 1);
    for (int64_t i = 0; i < rows * k; ++i) store(in, dt, i, next_value());
    seed_for(rank, call, 2); /* a different weight on every rank: its own column shard */
    for (int64_t i = 0; i < n * k; ++i) store(w, dt, i, next_value());
    seed_for(rank, call, 3);
    for (int64_t j = 0; j < n; ++j) store(bias, dt, j, next_value());
    memset(out, 0xFF, esz * (size_t)(m * n)); /* NaN: unwritten elements fail */
    memset(gathered, 0xEE, esz * (size_t)(m * k));

    if (call == 2) {
      fluxcpp_packed_weight_t packed = NULL;
      s = fluxcpp_packed_weight_create(ctx, dt, w, n, k, transpose_weight, &packed);
      CHECK(s == FLUXCPP_SUCCESS && packed != NULL, "packed_weight_create: %s",
            fluxcpp_last_error());
      s = fluxcpp_ag_gemm_forward_packed(op, in, m, packed, bias, out, gathered);
      CHECK(fluxcpp_packed_weight_destroy(packed) == FLUXCPP_SUCCESS, "packed_weight_destroy");
    } else {
      s = fluxcpp_ag_gemm_forward(op, in, m, w, with_extras ? bias : NULL, out,
                                  with_extras ? gathered : NULL);
    }
    CHECK(s == FLUXCPP_SUCCESS, "%s forward call %d: %s", name, call, fluxcpp_last_error());
    MPI_Allgather(in, (int)(esz * (size_t)(rows * k)), MPI_BYTE, ref_gathered,
                  (int)(esz * (size_t)(rows * k)), MPI_BYTE, MPI_COMM_WORLD);
    if (with_extras)
      CHECK(memcmp(gathered, ref_gathered, esz * (size_t)(m * k)) == 0,
            "%s gathered_input differs from MPI_Allgather", name);

    /* Naive reference in double; tolerance eps * (k + 2) * (sum |a||b| + |bias|). */
    int bad = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0, mag = 0.0;
        for (int64_t l = 0; l < k; ++l) {
          double a = load(ref_gathered, dt, i * k + l);
          double b = load(w, dt, transpose_weight ? l * n + j : j * k + l);
          acc += a * b;
          mag += absd(a * b);
        }
        if (with_extras) {
          acc += load(bias, dt, j);
          mag += absd(load(bias, dt, j));
        }
        double got = load(out, dt, i * n + j);
        double tol = eps * (double)(k + 2) * mag + 1e-30;
        if (!(absd(got - acc) <= tol)) {
          if (bad < 4)
            fprintf(stderr, "[rank %d] %s call %d: row %lld col %lld: expected %.10g, got %.10g\n",
                    rank, name, call, (long long)i, (long long)j, acc, got);
          ++bad;
        }
      }
    CHECK(bad == 0, "%s call %d (transpose_weight=%d): %d of %lld elements out of tolerance", name,
          call, transpose_weight, bad, (long long)(m * n));
  }

  /* Invalid arguments: every rank gets FLUXCPP_ERROR_INVALID_ARGUMENT naming ag_gemm. */
  s = fluxcpp_ag_gemm_forward(op, in, m + world, w, bias, out, NULL);
  EXPECT_INVALID(s, "ag_gemm", "%s m > max_m", name);
  if (world > 1) {
    s = fluxcpp_ag_gemm_forward(op, in, world + 1, w, bias, out, NULL);
    EXPECT_INVALID(s, "ag_gemm", "%s m %% W != 0", name);
  }
  s = fluxcpp_ag_gemm_forward(op, in, m, rank == world - 1 ? NULL : w, bias, out, NULL);
  EXPECT_INVALID(s, "ag_gemm", "%s NULL weight on the last rank", name);
  s = fluxcpp_ag_gemm_forward(op, NULL, 0, NULL, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s m == 0 is a no-op: %s", name, fluxcpp_last_error());
  if (dt == FLUXCPP_FLOAT32) { /* a NULL packed weight on one rank, one that does not fit */
    fluxcpp_packed_weight_t packed = NULL;
    s = fluxcpp_packed_weight_create(ctx, dt, w, k, n, transpose_weight,
                                     &packed); /* n, k swapped */
    CHECK(s == FLUXCPP_SUCCESS, "packed_weight_create: %s", fluxcpp_last_error());
    s = fluxcpp_ag_gemm_forward_packed(op, in, m, rank == world - 1 ? NULL : packed, bias, out,
                                       NULL);
    EXPECT_INVALID(s, "ag_gemm", "NULL or mismatched packed weight");
    fluxcpp_packed_weight_destroy(packed);
  }

  /* Still usable: a good forward matches the gathered input bit for bit. */
  memset(gathered, 0xEE, esz * (size_t)(m * k));
  s = fluxcpp_ag_gemm_forward(op, in, m, w, bias, out, gathered);
  CHECK(s == FLUXCPP_SUCCESS, "%s forward after errors: %s", name, fluxcpp_last_error());
  CHECK(memcmp(gathered, ref_gathered, esz * (size_t)(m * k)) == 0,
        "%s gathered_input after errors differs", name);

  CHECK(fluxcpp_ag_gemm_destroy(op) == FLUXCPP_SUCCESS, "%s destroy: %s", name,
        fluxcpp_last_error());
  free(in), free(w), free(bias), free(out), free(gathered), free(ref_gathered);
}

/* An invalid create (max_m = 4 W): FLUXCPP_ERROR_INVALID_ARGUMENT naming ag_gemm on every rank,
 * and no op. */
static void bad_create(fluxcpp_context_t ctx, int64_t k, fluxcpp_dtype_t in, fluxcpp_dtype_t out,
                       const char* what) {
  fluxcpp_ag_gemm_t bad = NULL;
  EXPECT_INVALID(fluxcpp_ag_gemm_create(ctx, 4 * world, 8, k, in, out, 0, &bad), "ag_gemm", "%s",
                 what);
  CHECK(bad == NULL, "%s: create gave an op", what);
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);
  fluxcpp_status_t s;

  run_case(ctx, FLUXCPP_FLOAT32, 0, 7, 13, 37);
  run_case(ctx, FLUXCPP_FLOAT64, 1, 5, 11, 29);

  /* Invalid dtype pairs, and k differing on one rank. */
  bad_create(ctx, 8, FLUXCPP_BFLOAT16, FLUXCPP_FLOAT64, "bf16 -> f64");
  bad_create(ctx, 8, FLUXCPP_FLOAT32, FLUXCPP_BFLOAT16, "f32 -> bf16");
  if (world > 1)
    bad_create(ctx, rank == 0 ? 9 : 8, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, "k differing");
  s = fluxcpp_ag_gemm_forward(NULL, NULL, 0, NULL, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle gave %d", (int)s);
  fluxcpp_packed_weight_t packed64 = NULL;
  double w64[4] = {0, 0, 0, 0};
  s = fluxcpp_packed_weight_create(ctx, FLUXCPP_FLOAT64, w64, 2, 2, 0, &packed64);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && packed64 == NULL, "packed f64 gave %d", (int)s);
  CHECK(fluxcpp_packed_weight_destroy(NULL) == FLUXCPP_SUCCESS, "packed destroy NULL");
  CHECK(fluxcpp_ag_gemm_destroy(NULL) == FLUXCPP_SUCCESS, "destroy NULL");

  return capi_end(ctx, "ag_gemm_capi");
}
