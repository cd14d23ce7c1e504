/* The reduce_scatter C ABI driven from C99: f32 and f64 forwards of small-integer patterns (exact
 * in any summation order) checked bit for bit against the closed-form sums, and invalid
 * arguments. Prints "reduce_scatter_capi: N passed, M failed" on rank 0; exits non-zero on
 * failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

/* Small integers in [-8, 8]: exact in f32 and f64, and so are their sums. */
static int64_t pattern(int s, int64_t row, int64_t col, int call) {
  return ((int64_t)s * 7 + row * 3 + col + (int64_t)call * 5) % 17 - 8;
}

/* One forward of the pattern with rows per rank `rows`: the block must equal the closed-form sum
 * bit for bit, and nothing past it may be written. */
static void check_forward(fluxcpp_reduce_scatter_t op, fluxcpp_dtype_t dt, int64_t rows, int64_t n,
                          int call) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  const size_t esz = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  const int64_t m = rows * world, guard = 8;
  void* in = malloc(esz * (size_t)(m * n + 1));
  unsigned char* out = malloc(esz * (size_t)(rows * n + guard));
  void* want = malloc(esz * (size_t)(rows * n + 1));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) store(in, dt, i * n + j, (double)pattern(rank, i, j, call));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int s = 0; s < world; ++s) sum += pattern(s, rank * rows + i, j, call);
      store(want, dt, i * n + j, (double)sum);
    }
  memset(out, 0xFF, esz * (size_t)(rows * n + guard)); /* NaN: unwritten elements fail */
  fluxcpp_status_t s = fluxcpp_reduce_scatter_forward(op, in, m, out);
  CHECK(s == FLUXCPP_SUCCESS, "%s forward m=%lld call %d: %s", name, (long long)m, call,
        fluxcpp_last_error());
  if (s == FLUXCPP_SUCCESS) {
    int64_t bad = -1;
    for (int64_t i = 0; i < rows * n && bad < 0; ++i)
      if (memcmp(out + esz * (size_t)i, (unsigned char*)want + esz * (size_t)i, esz) != 0) bad = i;
    CHECK(bad < 0, "%s m=%lld call %d: element (%lld, %lld) differs: expected %g, got %g", name,
          (long long)m, call, (long long)(bad / n), (long long)(bad % n),
          bad < 0 ? 0.0
                  : (dt == FLUXCPP_FLOAT32 ? (double)((float*)want)[bad] : ((double*)want)[bad]),
          bad < 0 ? 0.0
                  : (dt == FLUXCPP_FLOAT32 ? (double)((float*)(void*)out)[bad]
                                           : ((double*)(void*)out)[bad]));
    CHECK(untouched(out, esz * (size_t)(rows * n), esz * (size_t)(rows * n + guard), 0xFF),
          "%s m=%lld call %d: output written past this rank's block", name, (long long)m, call);
  }
  free(in), free(out), free(want);
}

static void run_case(fluxcpp_context_t ctx, fluxcpp_dtype_t dt, int64_t max_rows, int64_t n) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  const size_t esz = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  fluxcpp_reduce_scatter_t op = NULL;
  fluxcpp_status_t s = fluxcpp_reduce_scatter_create(ctx, max_rows * world, n, dt, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s reduce_scatter_create: %s", name,
        fluxcpp_last_error());
  if (op == NULL) return; /* same on every rank: create failed everywhere */

  const int64_t rows_cycle[] = {max_rows, 1, 0, 3, max_rows};
  for (int call = 0; call < 5; ++call) check_forward(op, dt, rows_cycle[call], n, call);

  /* Invalid arguments: every rank gets FLUXCPP_ERROR_INVALID_ARGUMENT naming reduce_scatter. */
  void* in = calloc((size_t)((max_rows + 1) * world * n), esz);
  void* out = calloc((size_t)((max_rows + 1) * n), esz);
  s = fluxcpp_reduce_scatter_forward(op, in, (max_rows + 1) * world, out);
  EXPECT_INVALID(s, "reduce_scatter", "%s m > max_m", name);
  if (world > 1) {
    s = fluxcpp_reduce_scatter_forward(op, in, world + 1, out);
    EXPECT_INVALID(s, "reduce_scatter", "%s m %% W != 0", name);
    s = fluxcpp_reduce_scatter_forward(op, in, rank == 0 ? 2 * world : world, out);
    EXPECT_INVALID(s, "reduce_scatter", "%s different m across ranks", name);
  }
  s = fluxcpp_reduce_scatter_forward(op, rank == world - 1 ? NULL : in, world, out);
  EXPECT_INVALID(s, "reduce_scatter", "%s NULL input on the last rank", name);
  s = fluxcpp_reduce_scatter_forward(op, in, world, rank == 0 ? NULL : out);
  EXPECT_INVALID(s, "reduce_scatter", "%s NULL output on rank 0", name);
  s = fluxcpp_reduce_scatter_forward(op, NULL, 0, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s m == 0 is a no-op: %s", name, fluxcpp_last_error());
  free(in);
  free(out);

  /* Still usable after the errors. */
  check_forward(op, dt, max_rows, n, 7);
  check_forward(op, dt, 2, n, 8);

  CHECK(fluxcpp_reduce_scatter_destroy(op) == FLUXCPP_SUCCESS, "%s destroy: %s", name,
        fluxcpp_last_error());
}

/* An invalid create (max_m = 4 W): FLUXCPP_ERROR_INVALID_ARGUMENT naming reduce_scatter on
 * every rank, and no op. */
static void bad_create(fluxcpp_context_t ctx, int64_t n, fluxcpp_dtype_t dt, const char* what) {
  fluxcpp_reduce_scatter_t bad = NULL;
  fluxcpp_status_t s = fluxcpp_reduce_scatter_create(ctx, 4 * world, n, dt, &bad);
  EXPECT_INVALID(s, "reduce_scatter", "%s", what);
  CHECK(bad == NULL, "%s: create gave an op", what);
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);
  fluxcpp_status_t s;

  run_case(ctx, FLUXCPP_FLOAT32, 7, 13);
  run_case(ctx, FLUXCPP_FLOAT64, 5, 300);

  /* Invalid create arguments. */
  bad_create(ctx, 0, FLUXCPP_FLOAT32, "n = 0");
  bad_create(ctx, 8, (fluxcpp_dtype_t)9, "bad dtype");
  if (world > 1) bad_create(ctx, rank == world - 1 ? 9 : 8, FLUXCPP_FLOAT32, "n differing");
  s = fluxcpp_reduce_scatter_forward(NULL, NULL, 0, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle gave %d", (int)s);
  CHECK(fluxcpp_reduce_scatter_destroy(NULL) == FLUXCPP_SUCCESS, "destroy NULL");

  return capi_end(ctx, "reduce_scatter_capi");
}
