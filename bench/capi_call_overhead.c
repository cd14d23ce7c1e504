/* capi_call_overhead: the time of one C ABI call with tiny shapes, made from C, for comparison
 * with the same call made through the Python module (scripts/bench_python_overhead.py).
 * Usage: mpirun -np W fluxcpp_capi_call_overhead [iterations]
 * Prints one line per op (rank 0): "op <name> W <W> us_per_call <wall> cpu_us_per_call <cpu>",
 * each the fastest of 7 runs of `iterations` calls; cpu is the calling thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID), which time slices given to other processes of a shared machine do
 * not inflate. */
#define _POSIX_C_SOURCE 199309L
#include <fluxcpp/fluxcpp.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CHECK(call)                                             \
  do {                                                          \
    fluxcpp_status_t s_ = (call);                               \
    if (s_ != FLUXCPP_SUCCESS) {                                \
      fprintf(stderr, "%s: %s\n", #call, fluxcpp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                             \
    }                                                           \
  } while (0)

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

enum { kRuns = 7, kN = 8, kK = 8 };

int main(int argc, char** argv) {
  int provided, rank, W;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const int iters = argc > 1 ? atoi(argv[1]) : 2000;
  fluxcpp_context_t ctx;
  CHECK(fluxcpp_context_create(MPI_COMM_WORLD, NULL, &ctx));
  float* x = calloc(kK, sizeof(float));
  float* w = calloc(kN * kK, sizeof(float));
  float* y = calloc((size_t)W * kN, sizeof(float));
  float* g = calloc((size_t)W * kK, sizeof(float));
  int64_t split = 1;
  fluxcpp_ag_gemm_t ag;
  fluxcpp_all_gather_t gather;
  fluxcpp_grouped_gemm_t gg;
  CHECK(fluxcpp_ag_gemm_create(ctx, W, kN, kK, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, &ag));
  CHECK(fluxcpp_all_gather_create(ctx, W, kK, FLUXCPP_FLOAT32, &gather));
  CHECK(fluxcpp_grouped_gemm_create(ctx, 1, 1, kN, kK, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, &gg));
  const char* names[3] = {"ag_gemm", "all_gather", "grouped_gemm"};
  for (int op = 0; op < 3; ++op) {
    double t[kRuns], c[kRuns];
    for (int r = 0; r < kRuns; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime(), c0 = thread_cpu_s();
      for (int i = 0; i < iters; ++i) {
        if (op == 0) CHECK(fluxcpp_ag_gemm_forward(ag, x, W, w, NULL, y, NULL));
        if (op == 1) CHECK(fluxcpp_all_gather_forward(gather, x, W, g));
        if (op == 2) CHECK(fluxcpp_grouped_gemm_forward(gg, x, &split, w, NULL, y));
      }
      t[r] = (MPI_Wtime() - t0) / iters * 1e6;
      c[r] = (thread_cpu_s() - c0) / iters * 1e6;
    }
    qsort(t, kRuns, sizeof t[0], cmp);
    qsort(c, kRuns, sizeof c[0], cmp);
    if (rank == 0)
      printf("op %s W %d us_per_call %.3f cpu_us_per_call %.3f\n", names[op], W, t[0], c[0]);
  }
  CHECK(fluxcpp_grouped_gemm_destroy(gg));
  CHECK(fluxcpp_all_gather_destroy(gather));
  CHECK(fluxcpp_ag_gemm_destroy(ag));
  CHECK(fluxcpp_context_destroy(ctx));
  free(x);
  free(w);
  free(y);
  free(g);
  MPI_Finalize();
  return 0;
}
