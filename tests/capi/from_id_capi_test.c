/* The MPI-free bootstrap through the C ABI, from C99, with no MPI anywhere: the parent makes an
 * id, fork()s W ranks (as a launcher that is not MPI's would start them), each creates its
 * context from the id, runs all_gather and all_reduce on integer patterns checked exactly, and
 * checks that MPI was never initialised. Then the argument errors: NULL pointers, a bad world
 * size or rank, a corrupted id, ranks_per_node. Prints "from_id_capi: N passed, M failed"; exits
 * non-zero on failure. A watchdog (alarm) fails a hang. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capi_check.h" /* CHECK and the counts; its MPI helpers stay unused here */

#define W 3
#define ROWS 16
#define COLS 24

static int has(const char* text, const char* needle) {
  return text != NULL && strstr(text, needle) != NULL;
}

static float value(int r, int i) {
  return (float)((r * 7 + i * 3) % 17 - 8);
}

/* One rank: create from the id, gather and reduce, destroy. Returns its exit status. */
static int run_rank(const fluxcpp_unique_id_t* id, int r) {
  rank = r;
  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  cfg.timeout_s = 30.0;
  fluxcpp_context_t ctx = NULL;
  fluxcpp_status_t s = fluxcpp_context_create_from_id(id, W, r, &cfg, &ctx);
  CHECK(s == FLUXCPP_SUCCESS && ctx != NULL, "create_from_id: %s", fluxcpp_last_error());
  if (ctx == NULL) return 1;
  int got_rank = -1, got_world = -1, node_rank = -1, node_size = -1;
  fluxcpp_context_info(ctx, &got_rank, &got_world, &node_rank, &node_size);
  CHECK(got_rank == r && got_world == W && node_rank == r && node_size == W,
        "info: rank %d world %d node rank %d node size %d", got_rank, got_world, node_rank,
        node_size);

  float in[ROWS * COLS], out[W * ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; ++i) in[i] = value(r, i);
  fluxcpp_all_gather_t ag = NULL;
  s = fluxcpp_all_gather_create(ctx, W * ROWS, COLS, FLUXCPP_FLOAT32, &ag);
  CHECK(s == FLUXCPP_SUCCESS, "all_gather create: %s", fluxcpp_last_error());
  for (int call = 0; call < 3 && ag != NULL; ++call) {
    memset(out, 0, sizeof out);
    s = fluxcpp_all_gather_forward(ag, in, W * ROWS, out);
    int bad = 0;
    for (int q = 0; q < W; ++q)
      for (int i = 0; i < ROWS * COLS; ++i) bad += out[q * ROWS * COLS + i] != value(q, i);
    CHECK(s == FLUXCPP_SUCCESS && bad == 0, "all_gather call %d: %d wrong: %s", call, bad,
          fluxcpp_last_error());
  }
  fluxcpp_all_gather_destroy(ag);

  fluxcpp_all_reduce_t ar = NULL;
  s = fluxcpp_all_reduce_create(ctx, ROWS * COLS, FLUXCPP_FLOAT32, &ar);
  CHECK(s == FLUXCPP_SUCCESS, "all_reduce create: %s", fluxcpp_last_error());
  float sum[ROWS * COLS];
  for (int call = 0; call < 3 && ar != NULL; ++call) {
    s = fluxcpp_all_reduce_forward(ar, in, ROWS * COLS, sum);
    int bad = 0;
    for (int i = 0; i < ROWS * COLS; ++i) {
      float want = 0;
      for (int q = 0; q < W; ++q) want += value(q, i);
      bad += sum[i] != want;
    }
    CHECK(s == FLUXCPP_SUCCESS && bad == 0, "all_reduce call %d: %d wrong: %s", call, bad,
          fluxcpp_last_error());
  }
  fluxcpp_all_reduce_destroy(ar);
  CHECK(fluxcpp_context_destroy(ctx) == FLUXCPP_SUCCESS, "destroy: %s", fluxcpp_last_error());
  int initialized = 1;
  MPI_Initialized(&initialized);
  CHECK(!initialized, "MPI was initialised in a context made without it");
  return failed == 0 ? 0 : 1;
}

/* A create that must fail on this rank alone with `want`, its message containing `needle`. */
/* former: the grouping set under its former name ranks_per_node (read when ranks_per_host is 0),
 * or both names set, former on ranks_per_node. */
static void fails_as(const fluxcpp_unique_id_t* id, int world, int r, int ranks_per_node,
                     int former, fluxcpp_status_t want, const char* needle) {
  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  cfg.timeout_s = 5.0;
  cfg.ranks_per_host = ranks_per_node;
  cfg.ranks_per_node = former;
  fluxcpp_context_t ctx = (fluxcpp_context_t)&cfg; /* must be reset to NULL */
  fluxcpp_status_t s = fluxcpp_context_create_from_id(id, world, r, &cfg, &ctx);
  CHECK(s == want && ctx == NULL && has(fluxcpp_last_error(), needle),
        "world %d rank %d ranks_per_node %d: status %d (want %d), message '%s' (want '%s')", world,
        r, ranks_per_node, (int)s, (int)want, fluxcpp_last_error(), needle);
}

static void fails(const fluxcpp_unique_id_t* id, int world, int r, int ranks_per_node,
                  fluxcpp_status_t want, const char* needle) {
  fails_as(id, world, r, ranks_per_node, 0, want, needle);
}

int main(void) {
  alarm(240); /* watchdog: SIGALRM kills a hang, and ctest sees the failure */
  CHECK(fluxcpp_get_unique_id(NULL) == FLUXCPP_ERROR_INVALID_ARGUMENT, "get_unique_id(NULL)");
  fluxcpp_unique_id_t id, other;
  CHECK(fluxcpp_get_unique_id(&id) == FLUXCPP_SUCCESS, "get_unique_id: %s", fluxcpp_last_error());
  CHECK(fluxcpp_get_unique_id(&other) == FLUXCPP_SUCCESS && memcmp(&id, &other, sizeof id) != 0,
        "two ids are the same");

  pid_t pids[W];
  for (int r = 0; r < W; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(run_rank(&id, r));
  }
  for (int r = 0; r < W; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d: exit status %d", r, status);
  }

  fluxcpp_context_t ctx = NULL;
  CHECK(fluxcpp_context_create_from_id(NULL, 1, 0, NULL, &ctx) == FLUXCPP_ERROR_INVALID_ARGUMENT &&
            has(fluxcpp_last_error(), "id"),
        "NULL id: %s", fluxcpp_last_error());
  fails(&other, 0, 0, 0, FLUXCPP_ERROR_INVALID_ARGUMENT, "world_size=0");
  fails(&other, 2, 2, 0, FLUXCPP_ERROR_INVALID_ARGUMENT, "rank=2");
  fails(&other, 2, -1, 0, FLUXCPP_ERROR_INVALID_ARGUMENT, "rank=-1");
  fluxcpp_unique_id_t bad = other;
  bad.internal[0] ^= 1;
  fails(&bad, 1, 0, 0, FLUXCPP_ERROR_INVALID_ARGUMENT, "fluxcpp_get_unique_id");
  /* Any other byte corrupted (the name's random part, the boot id, the secret): the checksum
   * says so, instead of a rendezvous that times out or a host that "differs" from itself. */
  const int corrupt_at[] = {8, 30, 100, 110, 127};
  for (size_t i = 0; i < sizeof corrupt_at / sizeof corrupt_at[0]; ++i) {
    bad = other;
    bad.internal[corrupt_at[i]] ^= 0x10;
    fails(&bad, 1, 0, 0, FLUXCPP_ERROR_INVALID_ARGUMENT, "corrupted");
  }
  fails(&other, 1, 0, 2, FLUXCPP_ERROR_INVALID_ARGUMENT, "ranks_per_host=2");
  /* The former name alone is still read; both names with different values are refused. */
  fails_as(&other, 1, 0, 0, 2, FLUXCPP_ERROR_INVALID_ARGUMENT, "ranks_per_host=2");
  fails_as(&other, 1, 0, 1, 2, FLUXCPP_ERROR_INVALID_ARGUMENT, "ranks_per_node=2 (its former name)");
  /* A NULL out-pointer on a one-rank context: the create fails, saying so. */
  fluxcpp_unique_id_t third;
  fluxcpp_get_unique_id(&third);
  CHECK(
      fluxcpp_context_create_from_id(&third, 1, 0, NULL, NULL) == FLUXCPP_ERROR_INVALID_ARGUMENT &&
          has(fluxcpp_last_error(), "out-pointer"),
      "NULL ctx: %s", fluxcpp_last_error());

  printf("from_id_capi: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
