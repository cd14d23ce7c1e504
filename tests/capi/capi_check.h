/* Shared by the C ABI tests (C99): pass/fail counting, the context, invalid-argument checks,
 * deterministic values, the closing line. Each test is one translation unit that includes this
 * once. */
#ifndef FLUXCPP_TESTS_CAPI_CHECK_H_
#define FLUXCPP_TESTS_CAPI_CHECK_H_

#include <fluxcpp/fluxcpp.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed = 0, failed = 0, rank = 0, world = 1;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (cond) {                                                       \
      ++passed;                                                       \
    } else {                                                          \
      ++failed;                                                       \
      fprintf(stderr, "[rank %d] %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
    }                                                                 \
  } while (0)

/* MPI_Init_thread with MPI_THREAD_MULTIPLE; sets rank and world. */
static inline void capi_init(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
}

/* Sums the counts over ranks, prints "<name>: N passed, M failed" on rank 0, finalizes MPI and
 * returns the exit status. */
static inline int capi_finish(const char* name) {
  int totals[2] = {passed, failed};
  MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s: %d passed, %d failed\n", name, totals[0], totals[1]);
  MPI_Finalize();
  return totals[1] == 0 ? 0 : 1;
}

/* The tests' context config: the defaults with a 20 s timeout, and ranks_per_node from
 * FLUXCPP_TEST_RANKS_PER_NODE when it is set (simulated hosts, as test_options in C++). */
static inline fluxcpp_context_config_t capi_config(void) {
  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  const char* rpn = getenv("FLUXCPP_TEST_RANKS_PER_NODE");
  cfg.timeout_s = 20.0;
  if (rpn != NULL) cfg.ranks_per_host = atoi(rpn);
  return cfg;
}

/* fluxcpp_context_create on MPI_COMM_WORLD with cfg, checked; the context (NULL if the create
 * failed). */
static inline fluxcpp_context_t capi_context(const fluxcpp_context_config_t* cfg) {
  fluxcpp_context_t ctx = NULL;
  const fluxcpp_status_t s = fluxcpp_context_create(MPI_COMM_WORLD, cfg, &ctx);
  CHECK(s == FLUXCPP_SUCCESS && ctx != NULL, "context_create: %s", fluxcpp_last_error());
  return ctx;
}

/* capi_init, then capi_context with capi_config(): the start of a test that needs no other
 * config. */
static inline fluxcpp_context_t capi_start(int* argc, char*** argv) {
  capi_init(argc, argv);
  fluxcpp_context_config_t cfg = capi_config();
  return capi_context(&cfg);
}

/* fluxcpp_context_destroy(ctx), checked, then capi_finish(name). */
static inline int capi_end(fluxcpp_context_t ctx, const char* name) {
  CHECK(fluxcpp_context_destroy(ctx) == FLUXCPP_SUCCESS, "context_destroy: %s",
        fluxcpp_last_error());
  return capi_finish(name);
}

/* Every rank must get FLUXCPP_ERROR_INVALID_ARGUMENT with a message that contains needle (the
 * op's name, or more of the message); what (printf-style) names the case, line is the caller's.
 * EXPECT_INVALID(s, needle, what...) passes the line. */
static inline void check_invalid(fluxcpp_status_t s, const char* needle, int line, const char* what,
                                 ...) {
  char text[256];
  va_list args;
  va_start(args, what);
  vsnprintf(text, sizeof text, what, args);
  va_end(args);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "line %d: %s: %s gave status %d, not INVALID_ARGUMENT",
        line, needle, text, (int)s);
  CHECK(strstr(fluxcpp_last_error(), needle) != NULL,
        "line %d: %s: %s: last_error does not name it: %s", line, needle, text,
        fluxcpp_last_error());
}
#define EXPECT_INVALID(s, needle, ...) check_invalid((s), (needle), __LINE__, __VA_ARGS__)

/* Whether bytes [from, to) of buf all still hold fill, the value they were set to before the
 * call: nothing was written past what the call owns. */
static inline int untouched(const void* buf, size_t from, size_t to, unsigned char fill) {
  for (size_t b = from; b < to; ++b)
    if (((const unsigned char*)buf)[b] != fill) return 0;
  return 1;
}

/* No libm: the targets may not link it. */
static inline double absd(double x) {
  return x < 0 ? -x : x;
}

static uint64_t rng_state = 0;

/* Seeds differ by rank (owner), call and tensor (salt). */
static inline void seed_for(int owner, int call, int salt) {
  rng_state = 0xD1B54A32D192ED03ull * (uint64_t)(owner + 1) +
              0x2545F4914F6CDD1Dull * (uint64_t)call + (uint64_t)salt;
}

/* A value in [-1, 1) with 24 significant bits: exact in f32 and f64 alike. */
static inline double next_value(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return ((double)(int64_t)(z >> 40) - 8388608.0) / 8388608.0;
}

/* Element i of an f32 or f64 buffer. */
static inline void store(void* buf, fluxcpp_dtype_t dt, int64_t i, double v) {
  if (dt == FLUXCPP_FLOAT32)
    ((float*)buf)[i] = (float)v;
  else
    ((double*)buf)[i] = v;
}

static inline double load(const void* buf, fluxcpp_dtype_t dt, int64_t i) {
  return dt == FLUXCPP_FLOAT32 ? (double)((const float*)buf)[i] : ((const double*)buf)[i];
}

#endif /* FLUXCPP_TESTS_CAPI_CHECK_H_ */
