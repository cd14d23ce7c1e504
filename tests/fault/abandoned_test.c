/* Abandoned collectives and MPI_Finalize (C99). Scenarios (argv[1]):
 *   timeout  every rank creates a context with a timeout far too short (1e-4, 1e-3 s) 4 times,
 *            so creates abandon collectives every rank did reach; then a create on a
 *            communicator made before works (all_gather exact) and MPI_Finalize returns on every
 *            rank (abandoned.cmake runs this 10 times at W = 2 and 3).
 *   null     the last rank passes MPI_COMM_NULL: the others' create is TIMEOUT saying the
 *            communicator may no longer carry collectives; their next create on it fails at once
 *            (INVALID_USAGE "can no longer carry collectives"); a create on a communicator made
 *            before the failure is INVALID_ARGUMENT on every rank naming the create the last
 *            rank missed (on MPI_COMM_NULL), the next one works on every rank; MPI_Finalize
 *            returns on every rank.
 *   null_then the last rank passes MPI_COMM_NULL and then MPI_COMM_WORLD, the others
 *            MPI_COMM_WORLD once: that create pairs the others' first call with the last rank's
 *            second, so it is INVALID_ARGUMENT on every rank naming the missed create (never
 *            SUCCESS); the next create on MPI_COMM_WORLD works on every rank.
 *   freed    as timeout, on a communicator the user dups first and frees after the creates
 *            (the orphans on it are driven as it goes, nothing is posted on it afterwards);
 *            then the recovery and MPI_Finalize as in timeout.
 *   late     the last rank creates on MPI_COMM_WORLD 1.5 s after the others, whose timeout is
 *            0.5 s: they get TIMEOUT; the late rank gets TIMEOUT too (never a context its peers
 *            gave up), naming a rank that gave up; then every rank creates on a communicator
 *            made before the failure (the documented recovery) and all_gather is exact.
 *   late_freed as late, on a communicator every rank dups and frees right after its create,
 *            the last rank 3 s late: past the 2 s the others' free drives the orphans, so their
 *            entry barrier is still pending when the communicator is freed, and the late rank's
 *            messages reach it afterwards (in their next create, or in MPI_Finalize). Every
 *            create is TIMEOUT, the recovery works and MPI_Finalize returns on every rank (it
 *            crashed in the freed communicator's barrier before).
 * Every rank prints "abandoned: rank R finalized" after MPI_Finalize; failures go to stderr and
 * the exit status. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fluxcpp/fluxcpp.h"

static int rank = 0, world = 1, failed = 0;

#define EXPECT(cond, ...)                                     \
  do {                                                        \
    if (!(cond)) {                                            \
      ++failed;                                               \
      fprintf(stderr, "[rank %d] line %d: ", rank, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
    }                                                         \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void recover_on(MPI_Comm comm, const char* what);

static void timeouts(int freed) {
  MPI_Comm before = MPI_COMM_NULL; /* made before the failures, on every rank */
  MPI_Comm_dup(MPI_COMM_WORLD, &before);
  MPI_Comm on = MPI_COMM_WORLD;
  if (freed) MPI_Comm_dup(MPI_COMM_WORLD, &on);
  fluxcpp_context_config_t c = FLUXCPP_CONTEXT_CONFIG_INIT;
  for (int i = 0; i < 4; ++i) {
    c.timeout_s = i % 2 ? 1e-3 : 1e-4;
    fluxcpp_context_t ctx = NULL;
    fluxcpp_status_t s = fluxcpp_context_create(on, &c, &ctx);
    EXPECT(s == FLUXCPP_SUCCESS || s == FLUXCPP_ERROR_TIMEOUT || s == FLUXCPP_ERROR_INVALID_USAGE,
           "create %d -> %s: %s", i, fluxcpp_status_string(s), fluxcpp_last_error());
    if (s == FLUXCPP_SUCCESS) fluxcpp_context_destroy(ctx); /* may time out too: any status */
  }
  if (freed) MPI_Comm_free(&on);
  /* The abandoned creates' host layouts run first, in order, on every rank: then this works. */
  recover_on(before, "a communicator made before the timed-out creates");
  MPI_Comm_free(&before);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Creates a context on `comm` (timeout 10 s) and checks an all_gather on it. */
static void recover_on(MPI_Comm comm, const char* what) {
  fluxcpp_context_config_t c = FLUXCPP_CONTEXT_CONFIG_INIT;
  c.timeout_s = 10;
  fluxcpp_context_t ctx = NULL;
  fluxcpp_status_t s = fluxcpp_context_create(comm, &c, &ctx);
  EXPECT(s == FLUXCPP_SUCCESS, "create on %s -> %s: %s", what, fluxcpp_status_string(s),
         fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS) return;
  fluxcpp_all_gather_t ag = NULL;
  float in[4], out[4 * 8];
  for (int j = 0; j < 4; ++j) in[j] = (float)(rank * 4 + j);
  s = fluxcpp_all_gather_create(ctx, world, 4, FLUXCPP_FLOAT32, &ag);
  EXPECT(s == FLUXCPP_SUCCESS, "all_gather create: %s", fluxcpp_last_error());
  if (s == FLUXCPP_SUCCESS) {
    s = fluxcpp_all_gather_forward(ag, in, world, out);
    EXPECT(s == FLUXCPP_SUCCESS, "all_gather: %s", fluxcpp_last_error());
    for (int i = 0; s == FLUXCPP_SUCCESS && i < 4 * world; ++i)
      EXPECT(out[i] == (float)i, "all_gather out[%d] = %g", i, (double)out[i]);
    fluxcpp_all_gather_destroy(ag);
  }
  EXPECT(fluxcpp_context_destroy(ctx) == FLUXCPP_SUCCESS, "destroy: %s", fluxcpp_last_error());
}

static void late_rank(void) {
  MPI_Comm before = MPI_COMM_NULL; /* made before the failure, on every rank */
  MPI_Comm_dup(MPI_COMM_WORLD, &before);
  fluxcpp_context_config_t c = FLUXCPP_CONTEXT_CONFIG_INIT;
  c.timeout_s = 0.5;
  fluxcpp_context_t ctx = NULL;
  const int late = rank == world - 1;
  if (late) sleep_s(1.5);
  fluxcpp_status_t s = fluxcpp_context_create(MPI_COMM_WORLD, &c, &ctx);
  if (late) {
    EXPECT(s == FLUXCPP_ERROR_TIMEOUT && strstr(fluxcpp_last_error(), "gave up"),
           "late create -> %s: %s", fluxcpp_status_string(s), fluxcpp_last_error());
  } else {
    EXPECT(s == FLUXCPP_ERROR_TIMEOUT, "create -> %s: %s", fluxcpp_status_string(s),
           fluxcpp_last_error());
  }
  if (s == FLUXCPP_SUCCESS) fluxcpp_context_destroy(ctx);
  recover_on(before, "the communicator made before the failure");
  MPI_Comm_free(&before);
}

static void late_freed(void) {
  MPI_Comm before = MPI_COMM_NULL, on = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &before);
  MPI_Comm_dup(MPI_COMM_WORLD, &on);
  fluxcpp_context_config_t c = FLUXCPP_CONTEXT_CONFIG_INIT;
  c.timeout_s = 0.5;
  fluxcpp_context_t ctx = NULL;
  if (rank == world - 1) sleep_s(3.0);
  fluxcpp_status_t s = fluxcpp_context_create(on, &c, &ctx);
  EXPECT(s == FLUXCPP_ERROR_TIMEOUT, "create -> %s: %s", fluxcpp_status_string(s),
         fluxcpp_last_error());
  if (s == FLUXCPP_SUCCESS) fluxcpp_context_destroy(ctx);
  MPI_Comm_free(&on);
  recover_on(before, "a communicator made before the failure, the other one freed");
  MPI_Comm_free(&before);
}

static void missed_then_works(MPI_Comm comm, const fluxcpp_context_config_t* c);

static void null_comm(void) {
  const int victim = world - 1;
  MPI_Comm before = MPI_COMM_NULL; /* made before the failure, on every rank */
  MPI_Comm_dup(MPI_COMM_WORLD, &before);
  fluxcpp_context_config_t c = FLUXCPP_CONTEXT_CONFIG_INIT;
  c.timeout_s = 0.5;
  fluxcpp_context_t ctx = NULL;
  if (rank == victim) {
    fluxcpp_status_t s = fluxcpp_context_create(MPI_COMM_NULL, &c, &ctx);
    EXPECT(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "create on MPI_COMM_NULL -> %s",
           fluxcpp_status_string(s));
  } else {
    fluxcpp_status_t s = fluxcpp_context_create(MPI_COMM_WORLD, &c, &ctx);
    EXPECT(s == FLUXCPP_ERROR_TIMEOUT && strstr(fluxcpp_last_error(), "can no longer carry"),
           "create -> %s: %s", fluxcpp_status_string(s), fluxcpp_last_error());
    const double t0 = now_s();
    s = fluxcpp_context_create(MPI_COMM_WORLD, &c, &ctx);
    const double took = now_s() - t0;
    EXPECT(s == FLUXCPP_ERROR_INVALID_USAGE && strstr(fluxcpp_last_error(), "can no longer carry"),
           "second create -> %s: %s", fluxcpp_status_string(s), fluxcpp_last_error());
    EXPECT(took < 0.4, "the second create took %.2f s (at once expected)", took);
  }
  /* Every rank goes on with the communicator made before the failure: its first create there is
   * told of the create the last rank missed, the next one works. */
  c.timeout_s = 10;
  missed_then_works(before, &c);
  MPI_Comm_free(&before);
}

/* The reproduction: the last rank's create on MPI_COMM_NULL, then on MPI_COMM_WORLD,
 * meets the others' only create on MPI_COMM_WORLD. */
static void null_then_world(void) {
  fluxcpp_context_config_t c = FLUXCPP_CONTEXT_CONFIG_INIT;
  c.timeout_s = 10;
  fluxcpp_context_t ctx = NULL;
  if (rank == world - 1) {
    fluxcpp_status_t s = fluxcpp_context_create(MPI_COMM_NULL, &c, &ctx);
    EXPECT(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "create on MPI_COMM_NULL -> %s",
           fluxcpp_status_string(s));
  }
  missed_then_works(MPI_COMM_WORLD, &c);
}

/* A create on comm is INVALID_ARGUMENT on every rank naming the last rank's missed create; the
 * next create on comm works (all_gather exact). */
static void missed_then_works(MPI_Comm comm, const fluxcpp_context_config_t* c) {
  fluxcpp_context_t ctx = NULL;
  fluxcpp_status_t s = fluxcpp_context_create(comm, c, &ctx);
  char want[64];
  snprintf(want, sizeof want, "rank %d passed 1", world - 1);
  EXPECT(s == FLUXCPP_ERROR_INVALID_ARGUMENT && strstr(fluxcpp_last_error(), "MPI_COMM_NULL") &&
             strstr(fluxcpp_last_error(), want) && strstr(fluxcpp_last_error(), "passed 0"),
         "create after the missed one -> %s: %s", fluxcpp_status_string(s), fluxcpp_last_error());
  if (s == FLUXCPP_SUCCESS) fluxcpp_context_destroy(ctx);
  recover_on(comm, "the same communicator, after the missed create");
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* scenario = argc > 1 ? argv[1] : "timeout";
  if (strcmp(scenario, "null") == 0)
    null_comm();
  else if (strcmp(scenario, "null_then") == 0)
    null_then_world();
  else if (strcmp(scenario, "late") == 0)
    late_rank();
  else if (strcmp(scenario, "late_freed") == 0)
    late_freed();
  else
    timeouts(strcmp(scenario, "freed") == 0);
  fflush(stderr);
  MPI_Finalize();
  printf("abandoned: rank %d finalized%s\n", rank, failed ? " (FAILED)" : "");
  fflush(stdout);
  return failed ? 1 : 0;
}
