/* fluxcpp_async_send_recv_* driven from C99: messages around the default ring (send, isend with
 * send_wait / send_test, m = 0, probe), an explicit symmetric peer list, a too-small receive
 * buffer (INVALID_ARGUMENT, the message stays queued), bad arguments, and a create whose peer
 * list is bad on one rank (INVALID_ARGUMENT on every rank, handle NULL). Every received message
 * is compared bit for bit with the same message moved by MPI_Sendrecv. Prints
 * "async_send_recv_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

#define MAX_M 9
#define N 7
#define MSGS 12

static int has(const char* text, const char* needle) {
  return text != NULL && strstr(text, needle) != NULL;
}

/* Message q from src: rows (q * 5 + src) % (MAX_M + 1), values from the seeded generator. */
static int64_t fill(float* buf, int src, int q) {
  const int64_t m = (int64_t)((q * 5 + src) % (MAX_M + 1));
  seed_for(src, q, 13);
  for (int64_t i = 0; i < m * N; ++i) buf[i] = (float)next_value();
  return m;
}

static void ring(fluxcpp_context_t ctx, int slots, const int* peers, int num_peers,
                 const char* how) {
  fluxcpp_async_send_recv_t op = NULL;
  fluxcpp_status_t s =
      fluxcpp_async_send_recv_create(ctx, MAX_M, N, FLUXCPP_FLOAT32, slots, num_peers, peers, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s create: %s", how, fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS) return;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  static float sent[MSGS][MAX_M * N], got[MSGS][MAX_M * N], ref[MAX_M * N];
  int64_t rows[MSGS];
  uint64_t seqs[MSGS];
  for (int q = 0; q < MSGS; ++q) {
    const int64_t m = fill(sent[q], rank, q);
    s = (q % 2 ? fluxcpp_async_send_recv_isend : fluxcpp_async_send_recv_send)(op, next, sent[q], m,
                                                                               &seqs[q]);
    CHECK(s == FLUXCPP_SUCCESS && seqs[q] == (uint64_t)q + 1, "%s send %d: %s", how, q,
          fluxcpp_last_error());
    int64_t seen = -1;
    while (seen < 0) {
      s = fluxcpp_async_send_recv_probe(op, prev, &seen);
      if (s != FLUXCPP_SUCCESS) break;
    }
    rows[q] = -1;
    s = fluxcpp_async_send_recv_recv(op, prev, got[q], MAX_M, &rows[q]);
    CHECK(s == FLUXCPP_SUCCESS && rows[q] == seen, "%s recv %d: %s (probe %lld, rows %lld)", how, q,
          fluxcpp_last_error(), (long long)seen, (long long)rows[q]);
  }
  for (int q = 1; q < MSGS; q += 2) {
    int done = 0;
    s = fluxcpp_async_send_recv_send_wait(op, next, seqs[q]);
    CHECK(s == FLUXCPP_SUCCESS, "%s send_wait %d: %s", how, q, fluxcpp_last_error());
    s = fluxcpp_async_send_recv_send_test(op, next, seqs[q], &done);
    CHECK(s == FLUXCPP_SUCCESS && done == 1, "%s send_test %d: %s", how, q, fluxcpp_last_error());
  }
  for (int q = 0; q < MSGS; ++q) {
    const int64_t m = fill(sent[q], rank, q);
    MPI_Status st;
    int count = 0;
    MPI_Sendrecv(sent[q], (int)(m * N), MPI_FLOAT, next, q, ref, MAX_M * N, MPI_FLOAT, prev, q,
                 MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_FLOAT, &count);
    CHECK(rows[q] * N == count, "%s message %d: %lld rows, MPI moved %d floats", how, q,
          (long long)rows[q], count);
    if (rows[q] * N == count)
      CHECK(memcmp(got[q], ref, (size_t)count * sizeof(float)) == 0, "%s message %d differs", how,
            q);
  }
  /* Five rows into room for two: INVALID_ARGUMENT, then received whole. */
  const int64_t five = 5;
  fill(sent[0], rank, 99);
  s = fluxcpp_async_send_recv_send(op, next, sent[0], five, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s send of 5 rows: %s", how, fluxcpp_last_error());
  int64_t m = -7;
  s = fluxcpp_async_send_recv_recv(op, prev, got[0], 2, &m);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && has(fluxcpp_last_error(), "stays queued") && m == -7,
        "%s recv into 2 rows: status %d, %s", how, (int)s, fluxcpp_last_error());
  s = fluxcpp_async_send_recv_recv(op, prev, got[0], MAX_M, &m);
  fill(ref, prev, 99);
  CHECK(s == FLUXCPP_SUCCESS && m == 5 && memcmp(got[0], ref, 5 * N * sizeof(float)) == 0,
        "%s recv of 5 rows: %s", how, fluxcpp_last_error());
  /* Bad arguments: the caller alone, nothing sent. */
  s = fluxcpp_async_send_recv_send(op, world, sent[0], 1, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && has(fluxcpp_last_error(), "not a peer"),
        "%s send to rank W: %d %s", how, (int)s, fluxcpp_last_error());
  s = fluxcpp_async_send_recv_send(op, next, sent[0], MAX_M + 1, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "%s send of max_m + 1 rows: %d", how, (int)s);
  s = fluxcpp_async_send_recv_send_test(op, next, 1, NULL);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "%s send_test with done NULL: %d", how, (int)s);
  s = fluxcpp_async_send_recv_probe(op, prev, &m);
  CHECK(s == FLUXCPP_SUCCESS && m == -1, "%s probe after everything: %d, m = %lld", how, (int)s,
        (long long)m);
  s = fluxcpp_async_send_recv_destroy(op);
  CHECK(s == FLUXCPP_SUCCESS, "%s destroy: %s", how, fluxcpp_last_error());
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);
  fluxcpp_status_t s;
  if (world >= 2) {
    ring(ctx, 1, NULL, 0, "ring, 1 slot");
    int peers[2] = {(rank + 1) % world, (rank + world - 1) % world};
    ring(ctx, 3, peers, world == 2 ? 1 : 2, "explicit list, 3 slots");
  } else if (rank == 0) {
    printf("async_send_recv_capi: W = 1 has no peers; only the create checks run\n");
  }
  /* A bad list on one rank: every rank fails, the handle is NULL. */
  fluxcpp_async_send_recv_t op = (fluxcpp_async_send_recv_t)1;
  s = fluxcpp_async_send_recv_create(ctx, MAX_M, N, FLUXCPP_FLOAT32, 1, rank == 0 ? 1 : 0, NULL,
                                     &op);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT && op == NULL && has(fluxcpp_last_error(), "peers"),
        "create with peers NULL and num_peers 1 on rank 0: %d %s", (int)s, fluxcpp_last_error());
  s = fluxcpp_async_send_recv_destroy(NULL);
  CHECK(s == FLUXCPP_SUCCESS, "destroy(NULL): %d", (int)s);
  return capi_end(ctx, "async_send_recv_capi");
}
