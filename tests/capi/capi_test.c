/* The C ABI driven from C99: context, all_gather, errors, timeouts, the launch guard. Prints
 * "N passed, M failed". */
#define _POSIX_C_SOURCE 200112L /* setenv, nanosleep */

#include <fluxcpp/fluxcpp.h>

#include <math.h> /* INFINITY, NAN: macros only, no libm */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi_check.h"

int main(int argc, char** argv) {
  capi_init(&argc, &argv);

  CHECK(fluxcpp_version() >= 100, "version %d", fluxcpp_version());
  CHECK(strcmp(fluxcpp_status_string(FLUXCPP_ERROR_TIMEOUT), "timeout") == 0, "status string");

  fluxcpp_context_config_t cfg = capi_config();
  fluxcpp_context_t ctx = capi_context(&cfg);
  fluxcpp_status_t s;
  int r = -1, w = -1, nr = -1, ns = -1;
  s = fluxcpp_context_info(ctx, &r, &w, &nr, &ns);
  CHECK(s == FLUXCPP_SUCCESS && r == rank && w == world && ns == world && nr == rank,
        "context_info %d %d %d %d", r, w, nr, ns);

  /* all_gather in f64 against MPI_Allgather */
  const int64_t k = 5, rows = 3;
  fluxcpp_all_gather_t ag = NULL;
  s = fluxcpp_all_gather_create(ctx, rows * world, k, FLUXCPP_FLOAT64, &ag);
  CHECK(s == FLUXCPP_SUCCESS, "all_gather_create: %s", fluxcpp_last_error());
  double* in = malloc(sizeof(double) * rows * k);
  double* out = malloc(sizeof(double) * rows * k * world);
  double* ref = malloc(sizeof(double) * rows * k * world);
  for (int i = 0; i < rows * k; ++i) in[i] = rank * 1000.0 + i;
  s = fluxcpp_all_gather_forward(ag, in, rows * world, out);
  CHECK(s == FLUXCPP_SUCCESS, "all_gather_forward: %s", fluxcpp_last_error());
  MPI_Allgather(in, (int)(rows * k), MPI_DOUBLE, ref, (int)(rows * k), MPI_DOUBLE, MPI_COMM_WORLD);
  CHECK(memcmp(out, ref, sizeof(double) * rows * k * world) == 0, "all_gather result differs");

  /* errors: too many rows, and a NULL input on the last rank only */
  s = fluxcpp_all_gather_forward(ag, in, (rows + 1) * world, out);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "m > max_m gave %d", (int)s);
  CHECK(strstr(fluxcpp_last_error(), "all_gather") != NULL, "last_error: %s", fluxcpp_last_error());
  s = fluxcpp_all_gather_forward(ag, rank == world - 1 ? NULL : in, rows * world, out);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL input gave %d", (int)s);
  CHECK(strstr(fluxcpp_last_error(), "NULL") != NULL, "last_error: %s", fluxcpp_last_error());
  s = fluxcpp_all_gather_forward(ag, in, 0, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "m == 0 is a no-op: %s", fluxcpp_last_error());

  /* a bad config on one rank fails on every rank, without a hang */
  fluxcpp_context_config_t small = FLUXCPP_CONTEXT_CONFIG_INIT;
  if (rank == 0) small.struct_size = 4;
  fluxcpp_context_t ctx2 = NULL;
  s = fluxcpp_context_create(MPI_COMM_WORLD, &small, &ctx2);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && ctx2 == NULL, "small struct_size gave %d", (int)s);
  CHECK(strstr(fluxcpp_last_error(), "struct_size") != NULL, "last_error: %s",
        fluxcpp_last_error());
  s = fluxcpp_context_create(MPI_COMM_WORLD, NULL, rank == world - 1 ? NULL : &ctx2);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL ctx out-pointer gave %d", (int)s);

  /* a NULL out-pointer on one rank fails on every rank, without a hang */
  fluxcpp_all_gather_t bad = NULL;
  s = fluxcpp_all_gather_create(ctx, world, k, FLUXCPP_FLOAT32, rank == 0 ? NULL : &bad);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && bad == NULL, "NULL op out-pointer gave %d", (int)s);
  s = fluxcpp_all_gather_create(ctx, world, k, (fluxcpp_dtype_t)9, &bad);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && bad == NULL, "bad dtype gave %d", (int)s);
  s = fluxcpp_all_gather_forward(NULL, in, 0, out);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "NULL handle gave %d", (int)s);

  /* timeouts: +inf and 1e10 (beyond a deadline's range) wait for a late peer; NaN and negative
   * are invalid arguments on every rank */
  const double forever[2] = {INFINITY, 1e10};
  for (int i = 0; i < 2; ++i) {
    fluxcpp_context_config_t tc = FLUXCPP_CONTEXT_CONFIG_INIT;
    tc.timeout_s = forever[i];
    fluxcpp_context_t tctx = NULL;
    s = fluxcpp_context_create(MPI_COMM_WORLD, &tc, &tctx);
    CHECK(s == FLUXCPP_SUCCESS, "timeout_s=%g: %s", forever[i], fluxcpp_last_error());
    fluxcpp_all_gather_t tag = NULL;
    s = fluxcpp_all_gather_create(tctx, rows * world, k, FLUXCPP_FLOAT64, &tag);
    CHECK(s == FLUXCPP_SUCCESS, "timeout_s=%g: all_gather_create: %s", forever[i],
          fluxcpp_last_error());
    if (rank == 0) {
      struct timespec late = {0, 50 * 1000 * 1000};
      nanosleep(&late, NULL);
    }
    s = fluxcpp_all_gather_forward(tag, in, rows * world, out);
    CHECK(s == FLUXCPP_SUCCESS, "timeout_s=%g: a peer 50 ms late: %s", forever[i],
          fluxcpp_last_error());
    CHECK(memcmp(out, ref, sizeof(double) * rows * k * world) == 0, "timeout_s=%g: result",
          forever[i]);
    CHECK(fluxcpp_all_gather_destroy(tag) == FLUXCPP_SUCCESS, "destroy");
    CHECK(fluxcpp_context_destroy(tctx) == FLUXCPP_SUCCESS, "context_destroy");
  }
  const double bad_timeouts[2] = {NAN, -1.0};
  const char* bad_text[2] = {"timeout_s=nan", "timeout_s=-1"};
  for (int i = 0; i < 2; ++i) {
    fluxcpp_context_config_t tc = FLUXCPP_CONTEXT_CONFIG_INIT;
    tc.timeout_s = rank == world - 1 ? bad_timeouts[i] : 5.0;
    fluxcpp_context_t tctx = NULL;
    s = fluxcpp_context_create(MPI_COMM_WORLD, &tc, &tctx);
    CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && tctx == NULL, "%s gave %d", bad_text[i], (int)s);
    CHECK(strstr(fluxcpp_last_error(), bad_text[i]) != NULL, "last_error: %s",
          fluxcpp_last_error());
  }

  /* launch guard: a world of one in a job whose launcher started two processes */
  if (world == 1) {
    fluxcpp_context_t gctx = NULL;
    setenv("WORLD_SIZE", "2", 1);
    s = fluxcpp_context_create(MPI_COMM_WORLD, NULL, &gctx);
    CHECK(s == FLUXCPP_ERROR_INVALID_USAGE && gctx == NULL, "WORLD_SIZE=2 gave %d", (int)s);
    CHECK(strstr(fluxcpp_last_error(), "mpirun -np 2") != NULL, "last_error: %s",
          fluxcpp_last_error());
    setenv("WORLD_SIZE", "1", 1);
    s = fluxcpp_context_create(MPI_COMM_WORLD, NULL, &gctx);
    CHECK(s == FLUXCPP_SUCCESS, "WORLD_SIZE=1: %s", fluxcpp_last_error());
    CHECK(fluxcpp_context_destroy(gctx) == FLUXCPP_SUCCESS, "context_destroy");
    unsetenv("WORLD_SIZE");
  }

  CHECK(fluxcpp_all_gather_destroy(ag) == FLUXCPP_SUCCESS, "destroy");
  CHECK(fluxcpp_all_gather_destroy(NULL) == FLUXCPP_SUCCESS, "destroy NULL");
  CHECK(fluxcpp_context_destroy(ctx) == FLUXCPP_SUCCESS, "context_destroy: %s",
        fluxcpp_last_error());
  CHECK(fluxcpp_context_destroy(NULL) == FLUXCPP_SUCCESS, "context_destroy NULL");
  free(in);
  free(out);
  free(ref);

  return capi_finish("capi");
}
