/* Fork (C99): a child forked after a context and its ops were created holds copies of them. Every
 * call on a copy must return INVALID_USAGE naming both process ids and touch nothing shared; the
 * child's destroys are local and return at once (no thread of the parent is waited for, even with
 * FLUXCPP_COPY_OFFLOAD=on); and the parent's results stay exact while the child keeps calling
 * forward on its copies with other inputs. A watchdog (alarm) ends a child that hangs, which
 * fails the test. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../capi/capi_check.h"

enum { kRows = 8, kN = 16, kK = 32, kCalls = 6 };

/* Multiples of 1/8 in [-0.5, 0.5]: every product and sum below is exact in f32. */
static float in_value(int owner, int call, int row, int col) {
  return (float)((row * 7 + col * 3 + owner * 5 + call) % 9 - 4) / 8.0f;
}
static float w_value(int owner, int row, int col) {
  return (float)((row * 5 + col + owner) % 7 - 3) / 8.0f;
}

static int mentions(const char* msg, long pid) {
  char buf[32];
  snprintf(buf, sizeof buf, "%ld", pid);
  return strstr(msg, buf) != NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The child: calls on copies are refused naming both pids; destroys are local and quick. */
static int child(fluxcpp_context_t ctx, fluxcpp_ag_gemm_t op, fluxcpp_async_send_recv_t p2p,
                 long parent) {
  int bad = 0;
  const long me = (long)getpid();
  float input[kRows * kK], weight[kN * kK];
  float* out = malloc(sizeof(float) * kRows * world * kN);
  alarm(20); /* watchdog: a hang kills the child, the parent sees it */
  for (int i = 0; i < kRows * kK; ++i) input[i] = 100.0f; /* garbage the parent must never see */
  for (int i = 0; i < kN * kK; ++i) weight[i] = 100.0f;
  for (int call = 0; call < 50; ++call) {
    fluxcpp_status_t s =
        fluxcpp_ag_gemm_forward(op, input, (int64_t)kRows * world, weight, NULL, out, NULL);
    const char* msg = fluxcpp_last_error();
    if (s != FLUXCPP_ERROR_INVALID_USAGE || !mentions(msg, me) || !mentions(msg, parent)) {
      fprintf(stderr, "[rank %d child] forward on a copy -> %d: %s\n", rank, (int)s, msg);
      bad = 1;
      break;
    }
  }
  void* buf = NULL;
  if (fluxcpp_ag_gemm_input_buffer(op, &buf) != FLUXCPP_ERROR_INVALID_USAGE) bad = 1;
  const int dst = (rank + 1) % world;
  if (world > 1 &&
      fluxcpp_async_send_recv_send(p2p, dst, input, 1, NULL) != FLUXCPP_ERROR_INVALID_USAGE)
    bad = 1;
  const double t0 = now_s();
  if (fluxcpp_async_send_recv_destroy(p2p) != FLUXCPP_SUCCESS) bad = 1;
  if (fluxcpp_ag_gemm_destroy(op) != FLUXCPP_SUCCESS) bad = 1;
  if (fluxcpp_context_destroy(ctx) != FLUXCPP_SUCCESS) bad = 1;
  if (now_s() - t0 > 1.0) {
    fprintf(stderr, "[rank %d child] destroys took %.2f s\n", rank, now_s() - t0);
    bad = 1;
  }
  free(out);
  return bad;
}

int main(int argc, char** argv) {
  capi_init(&argc, &argv);
  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  cfg.timeout_s = 5.0;
  fluxcpp_context_t ctx = NULL;
  CHECK(fluxcpp_context_create(MPI_COMM_WORLD, &cfg, &ctx) == FLUXCPP_SUCCESS, "context: %s",
        fluxcpp_last_error());
  fluxcpp_ag_gemm_t op = NULL;
  CHECK(fluxcpp_ag_gemm_create(ctx, (int64_t)kRows * world, kN, kK, FLUXCPP_FLOAT32,
                               FLUXCPP_FLOAT32, 0, &op) == FLUXCPP_SUCCESS,
        "ag_gemm create: %s", fluxcpp_last_error());
  fluxcpp_async_send_recv_t p2p = NULL;
  CHECK(fluxcpp_async_send_recv_create(ctx, 1, kK, FLUXCPP_FLOAT32, 2, 0, NULL, &p2p) ==
            FLUXCPP_SUCCESS,
        "async_send_recv create: %s", fluxcpp_last_error());

  float input[kRows * kK], weight[kN * kK];
  float* out = malloc(sizeof(float) * kRows * world * kN);
  for (int i = 0; i < kN; ++i)
    for (int j = 0; j < kK; ++j) weight[i * kK + j] = w_value(rank, i, j);
  const long parent = (long)getpid();
  pid_t kid = -1;
  for (int call = 0; call < kCalls; ++call) {
    if (call == 1) {
      fflush(stdout);
      fflush(stderr);
      kid = fork();
      if (kid == 0) _exit(child(ctx, op, p2p, parent));
      CHECK(kid > 0, "fork failed");
    }
    for (int i = 0; i < kRows; ++i)
      for (int j = 0; j < kK; ++j) input[i * kK + j] = in_value(rank, call, i, j);
    fluxcpp_status_t s =
        fluxcpp_ag_gemm_forward(op, input, (int64_t)kRows * world, weight, NULL, out, NULL);
    CHECK(s == FLUXCPP_SUCCESS, "forward %d: %s", call, fluxcpp_last_error());
    int wrong = 0;
    for (int g = 0; g < kRows * world; ++g)
      for (int c = 0; c < kN; ++c) {
        double want = 0;
        for (int j = 0; j < kK; ++j)
          want += (double)in_value(g / kRows, call, g % kRows, j) * w_value(rank, c, j);
        wrong += out[g * kN + c] != (float)want;
      }
    CHECK(wrong == 0, "forward %d after the fork: %d wrong values", call, wrong);
    if (world > 1) { /* the pair the child's copy also holds still delivers in order */
      const int dst = (rank + 1) % world, src = (rank + world - 1) % world;
      float msg[kK], got[kK];
      for (int j = 0; j < kK; ++j) msg[j] = (float)(call * 100 + rank);
      CHECK(fluxcpp_async_send_recv_send(p2p, dst, msg, 1, NULL) == FLUXCPP_SUCCESS, "send: %s",
            fluxcpp_last_error());
      int64_t m = -1;
      CHECK(fluxcpp_async_send_recv_recv(p2p, src, got, 1, &m) == FLUXCPP_SUCCESS, "recv: %s",
            fluxcpp_last_error());
      CHECK(m == 1 && got[0] == (float)(call * 100 + src), "recv %d: m=%lld value %g", call,
            (long long)m, (double)got[0]);
    }
  }
  int status = 0;
  CHECK(kid > 0 && waitpid(kid, &status, 0) == kid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the child failed or hung (status %#x; a watchdog SIGALRM is signal 14)", status);
  CHECK(fluxcpp_async_send_recv_destroy(p2p) == FLUXCPP_SUCCESS, "p2p destroy: %s",
        fluxcpp_last_error());
  CHECK(fluxcpp_ag_gemm_destroy(op) == FLUXCPP_SUCCESS, "destroy: %s", fluxcpp_last_error());
  CHECK(fluxcpp_context_destroy(ctx) == FLUXCPP_SUCCESS, "context destroy: %s",
        fluxcpp_last_error());
  free(out);
  return capi_finish("fork");
}
