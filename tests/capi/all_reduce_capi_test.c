/* The all_reduce C ABI driven from C99: f32 and f64 forwards of small-integer patterns (exact in
 * any summation order) checked bit for bit against the closed-form sums, out of place, in place
 * and from the zero-copy input buffer, at counts on both sides of the one-shot threshold; invalid
 * arguments. Prints "all_reduce_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

/* Small integers in [-8, 8]: exact in f32 and f64, and so are their sums. */
static int64_t pattern(int s, int64_t i, int call) {
  return ((int64_t)s * 7 + i * 3 + (int64_t)call * 5) % 17 - 8;
}

enum mode { OUT_OF_PLACE, IN_PLACE, ZERO_COPY };

/* One forward of the pattern: the output must equal the closed-form sum bit for bit, and nothing
 * past it may be written. */
static void check_forward(fluxcpp_all_reduce_t op, fluxcpp_dtype_t dt, int64_t count, int call,
                          enum mode mode) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  const size_t esz = dt == FLUXCPP_FLOAT32 ? 4 : 8;
  const int64_t guard = 8;
  unsigned char* in = malloc(esz * (size_t)(count + 1));
  unsigned char* out = malloc(esz * (size_t)(count + guard));
  unsigned char* want = malloc(esz * (size_t)(count + 1));
  for (int64_t i = 0; i < count; ++i) {
    int64_t sum = 0;
    for (int s = 0; s < world; ++s) sum += pattern(s, i, call);
    store(in, dt, i, (double)pattern(rank, i, call));
    store(want, dt, i, (double)sum);
  }
  memset(out, 0xFF, esz * (size_t)(count + guard)); /* NaN: unwritten elements fail */
  const void* src = in;
  if (mode == IN_PLACE) {
    memcpy(out, in, esz * (size_t)count);
    src = out;
  } else if (mode == ZERO_COPY) {
    void* slot = NULL;
    CHECK(fluxcpp_all_reduce_input_buffer(op, &slot) == FLUXCPP_SUCCESS && slot != NULL,
          "%s input_buffer: %s", name, fluxcpp_last_error());
    if (slot != NULL) memcpy(slot, in, esz * (size_t)count);
    src = slot;
  }
  fluxcpp_status_t s = fluxcpp_all_reduce_forward(op, src, count, out);
  CHECK(s == FLUXCPP_SUCCESS, "%s forward count=%lld call %d mode %d: %s", name, (long long)count,
        call, (int)mode, fluxcpp_last_error());
  if (s == FLUXCPP_SUCCESS) {
    int64_t bad = -1;
    for (int64_t i = 0; i < count && bad < 0; ++i)
      if (memcmp(out + esz * (size_t)i, want + esz * (size_t)i, esz) != 0) bad = i;
    CHECK(bad < 0, "%s count=%lld call %d mode %d: element %lld: expected %g, got %g", name,
          (long long)count, call, (int)mode, (long long)bad, bad < 0 ? 0.0 : load(want, dt, bad),
          bad < 0 ? 0.0 : load(out, dt, bad));
    CHECK(untouched(out, esz * (size_t)count, esz * (size_t)(count + guard), 0xFF),
          "%s count=%lld call %d: output written past count", name, (long long)count, call);
  }
  free(in), free(out), free(want);
}

static void run_case(fluxcpp_context_t ctx, fluxcpp_dtype_t dt, int64_t max_count) {
  const char* name = dt == FLUXCPP_FLOAT32 ? "f32" : "f64";
  fluxcpp_all_reduce_t op = NULL;
  fluxcpp_status_t s = fluxcpp_all_reduce_create(ctx, max_count, dt, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s all_reduce_create: %s", name, fluxcpp_last_error());
  if (op == NULL) return; /* same on every rank: create failed everywhere */

  const int64_t counts[] = {max_count, 1, 0, 1001, 33, max_count};
  for (int call = 0; call < 6; ++call)
    check_forward(op, dt, counts[call], call, (enum mode)(call % 3));

  /* Invalid arguments: every rank gets FLUXCPP_ERROR_INVALID_ARGUMENT naming all_reduce. */
  void* in = calloc((size_t)(max_count + 1), 8);
  void* out = calloc((size_t)(max_count + 1), 8);
  s = fluxcpp_all_reduce_forward(op, in, max_count + 1, out);
  EXPECT_INVALID(s, "all_reduce: count=", "%s count > max_count", name);
  s = fluxcpp_all_reduce_forward(op, rank == world - 1 ? NULL : in, 5, out);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "%s NULL input on the last rank gave %d", name,
        (int)s);
  s = fluxcpp_all_reduce_forward(op, out, 5, (char*)out + (rank == 0 ? 4 : 0));
  EXPECT_INVALID(s, "overlap", "%s overlap on rank 0", name);
  if (world > 1) {
    s = fluxcpp_all_reduce_forward(op, in, rank == 0 ? 6 : 5, out);
    CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "%s different counts gave %d", name, (int)s);
  }
  s = fluxcpp_all_reduce_forward(op, NULL, 0, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s count == 0 is a no-op: %s", name, fluxcpp_last_error());
  free(in);
  free(out);

  check_forward(op, dt, max_count, 7, OUT_OF_PLACE); /* still usable */
  CHECK(fluxcpp_all_reduce_destroy(op) == FLUXCPP_SUCCESS, "%s destroy: %s", name,
        fluxcpp_last_error());
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);

  run_case(ctx, FLUXCPP_FLOAT32, 70001); /* above the one-shot threshold: both algorithms */
  run_case(ctx, FLUXCPP_FLOAT64, 5000);

  fluxcpp_all_reduce_t bad = NULL;
  fluxcpp_status_t s = fluxcpp_all_reduce_create(ctx, 0, FLUXCPP_FLOAT32, &bad);
  EXPECT_INVALID(s, "all_reduce: max_count=0", "max_count = 0");
  CHECK(bad == NULL, "max_count = 0 gave an op");
  s = fluxcpp_all_reduce_create(ctx, 10, (fluxcpp_dtype_t)9, &bad);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && bad == NULL, "bad dtype gave %d", (int)s);
  s = fluxcpp_all_reduce_forward(NULL, NULL, 0, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle gave %d", (int)s);
  CHECK(fluxcpp_all_reduce_destroy(NULL) == FLUXCPP_SUCCESS, "destroy NULL");

  return capi_end(ctx, "all_reduce_capi");
}
