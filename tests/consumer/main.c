/* A C99 program that knows fluxcpp only through fluxcpp/fluxcpp.h: built by every consumer test
 * (find_package in C and mixed projects, pkg-config, add_subdirectory, FetchContent). It checks a
 * context, an all_gather and an ag_gemm with exact closed-form values, and an invalid argument
 * (the C++ exception behind it must come back as a status code). Exits non-zero on any failure,
 * agreed over the ranks. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int rank = 0, world = 1, bad = 0;

static void check(int ok, const char* what) {
  if (ok) return;
  ++bad;
  fprintf(stderr, "consumer_c rank %d: %s (last error: %s)\n", rank, what, fluxcpp_last_error());
}

/* Small integers: every product and sum below is exact in f32. */
static float input_value(int owner, int64_t row, int64_t col) {
  return (float)(owner * 8 + row * 3 + col);
}

static void all_gather(fluxcpp_context_t ctx) {
  const int64_t rows = 2, k = 3, m = rows * world;
  float* in = malloc(sizeof(float) * (size_t)(rows * k));
  float* out = malloc(sizeof(float) * (size_t)(m * k));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < k; ++c) in[i * k + c] = input_value(rank, i, c);
  fluxcpp_all_gather_t op = NULL;
  check(fluxcpp_all_gather_create(ctx, m, k, FLUXCPP_FLOAT32, &op) == FLUXCPP_SUCCESS,
        "all_gather_create");
  check(fluxcpp_all_gather_forward(op, in, m, out) == FLUXCPP_SUCCESS, "all_gather_forward");
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c)
      check(out[r * k + c] == input_value((int)(r / rows), r % rows, c), "all_gather value");
  check(fluxcpp_all_gather_destroy(op) == FLUXCPP_SUCCESS, "all_gather_destroy");
  free(in);
  free(out);
}

static void ag_gemm(fluxcpp_context_t ctx) {
  const int64_t rows = 2, n = 2, k = 3, m = rows * world;
  float in[6], weight[6], bias[2] = {1.0f, -2.0f};
  float* out = malloc(sizeof(float) * (size_t)(m * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < k; ++c) in[i * k + c] = input_value(rank, i, c);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; ++c) weight[j * k + c] = (float)(j + 1 - c);
  fluxcpp_ag_gemm_t op = NULL;
  check(fluxcpp_ag_gemm_create(ctx, m, n, k, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, &op) ==
            FLUXCPP_SUCCESS,
        "ag_gemm_create");
  check(fluxcpp_ag_gemm_forward(op, in, m, weight, bias, out, NULL) == FLUXCPP_SUCCESS,
        "ag_gemm_forward");
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float want = bias[j];
      for (int64_t c = 0; c < k; ++c)
        want += input_value((int)(r / rows), r % rows, c) * weight[j * k + c];
      check(out[r * n + j] == want, "ag_gemm value");
    }
  check(fluxcpp_ag_gemm_destroy(op) == FLUXCPP_SUCCESS, "ag_gemm_destroy");
  free(out);
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  check(fluxcpp_version() > 0, "fluxcpp_version");

  fluxcpp_context_t ctx = NULL;
  check(fluxcpp_context_create(MPI_COMM_WORLD, NULL, &ctx) == FLUXCPP_SUCCESS, "context_create");
  if (ctx != NULL) {
    int r = -1, w = -1;
    check(
        fluxcpp_context_info(ctx, &r, &w, NULL, NULL) == FLUXCPP_SUCCESS && r == rank && w == world,
        "context_info");
    all_gather(ctx);
    ag_gemm(ctx);
    fluxcpp_all_gather_t op = NULL;
    check(fluxcpp_all_gather_create(ctx, world, 0, FLUXCPP_FLOAT32, &op) ==
                  FLUXCPP_ERROR_INVALID_ARGUMENT &&
              op == NULL && fluxcpp_last_error()[0] != '\0',
          "k = 0 is an invalid argument");
    check(fluxcpp_context_destroy(ctx) == FLUXCPP_SUCCESS, "context_destroy");
  }

  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("consumer_c: %s (%d ranks)\n", bad == 0 ? "ok" : "WRONG", world);
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
