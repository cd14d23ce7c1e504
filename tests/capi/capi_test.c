/* The C ABI driven from C99: context, all_gather, errors. Prints "N passed, M failed". */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

int main(int argc, char** argv) {
  capi_init(&argc, &argv);

  CHECK(fluxcpp_version() >= 100, "version %d", fluxcpp_version());
  CHECK(strcmp(fluxcpp_status_string(FLUXCPP_ERROR_TIMEOUT), "timeout") == 0, "status string");

  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  cfg.timeout_s = 20.0;
  fluxcpp_context_t ctx = NULL;
  fluxcpp_status_t s = fluxcpp_context_create(MPI_COMM_WORLD, &cfg, &ctx);
  CHECK(s == FLUXCPP_SUCCESS && ctx != NULL, "context_create: %s", fluxcpp_last_error());
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
