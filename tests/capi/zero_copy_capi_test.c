/* Zero-copy input through the C ABI, driven from C99: for each of all_gather, ag_gemm,
 * all_to_all_single and a2a_gemm, fluxcpp_<op>_input_buffer with a NULL op or NULL buffer is
 * FLUXCPP_ERROR_INVALID_ARGUMENT; a forward from the buffer is exact (bit for bit against
 * MPI_Allgather / MPI_Alltoall(v) and, for the GEMM ops, a triple loop: the values are multiples
 * of 1/8, so every sum is exact); a second forward from the buffer without input_buffer is
 * FLUXCPP_ERROR_INVALID_USAGE naming the op on every rank; a correct call then succeeds.
 * Prints "zero_copy_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

/* count values from the stream of (owner, call, salt): multiples of 1/8 in [-1, 1], or for
 * weights -1, 0 or 1; sums of k = 8 products plus a bias are then exact in f32. */
static void fill(float* v, int64_t count, int owner, int call, int salt, int weights) {
  seed_for(owner, call, salt);
  for (int64_t i = 0; i < count; ++i) {
    const int x = (int)((next_value() + 1.0) * 8.5) - 8;
    v[i] = weights ? (float)(x % 2) : (float)x / 8.0f;
  }
}

static void* alloc(size_t bytes) {
  return malloc(bytes > 0 ? bytes : 1);
}

/* out [m, n] == a [m, k] · w[n, k]ᵀ + bias, exactly (the sums are exact in f32). */
static int gemm_exact(const float* a, const float* w, const float* bias, const float* out,
                      int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias[j];
      for (int64_t l = 0; l < k; ++l) acc += (double)a[i * k + l] * w[j * k + l];
      float want = (float)acc;
      if (memcmp(&want, &out[i * n + j], 4) != 0) {
        fprintf(stderr, "[rank %d] row %lld col %lld: expected %g, got %g\n", rank, (long long)i,
                (long long)j, acc, (double)out[i * n + j]);
        return 0;
      }
    }
  return 1;
}

/* The misuse: FLUXCPP_ERROR_INVALID_USAGE with a message naming the op and input_buffer. */
static void check_misuse(fluxcpp_status_t s, const char* op) {
  CHECK(s == FLUXCPP_ERROR_INVALID_USAGE,
        "%s: forward from the buffer without input_buffer gave %d", op, (int)s);
  CHECK(strstr(fluxcpp_last_error(), op) != NULL && strstr(fluxcpp_last_error(), "input_buffer"),
        "%s: last_error: %s", op, fluxcpp_last_error());
}

/* Calls 0 and 2 write into the buffer and forward from it; call 1 forwards from it again without
 * input_buffer. */
static void all_gather(fluxcpp_context_t ctx) {
  const int64_t rows = 4, k = 16, m = rows * world;
  const size_t shard = (size_t)(rows * k) * 4;
  fluxcpp_all_gather_t op = NULL;
  void *buf = NULL, *first = NULL;
  float* out = alloc(shard * world);
  float* ref = alloc(shard * world);
  CHECK(fluxcpp_all_gather_create(ctx, m, k, FLUXCPP_FLOAT32, &op) == FLUXCPP_SUCCESS,
        "all_gather create: %s", fluxcpp_last_error());
  CHECK(fluxcpp_all_gather_input_buffer(NULL, &buf) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "all_gather: NULL op");
  CHECK(fluxcpp_all_gather_input_buffer(op, NULL) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "all_gather: NULL buffer");
  for (int call = 0; call < 3; ++call) {
    if (call == 1) {
      check_misuse(fluxcpp_all_gather_forward(op, buf, m, out), "all_gather");
      continue;
    }
    CHECK(fluxcpp_all_gather_input_buffer(op, &buf) == FLUXCPP_SUCCESS && buf != NULL,
          "all_gather input_buffer: %s", fluxcpp_last_error());
    if (first == NULL) first = buf;
    CHECK(buf == first, "all_gather: the buffer moved");
    fill(buf, rows * k, rank, call, 1, 0);
    MPI_Allgather(buf, (int)shard, MPI_BYTE, ref, (int)shard, MPI_BYTE, MPI_COMM_WORLD);
    CHECK(fluxcpp_all_gather_forward(op, buf, m, out) == FLUXCPP_SUCCESS,
          "all_gather forward call %d: %s", call, fluxcpp_last_error());
    CHECK(memcmp(out, ref, shard * world) == 0, "all_gather call %d differs", call);
  }
  CHECK(fluxcpp_all_gather_destroy(op) == FLUXCPP_SUCCESS, "all_gather destroy");
  free(out);
  free(ref);
}

static void ag_gemm(fluxcpp_context_t ctx) {
  const int64_t rows = 3, n = 5, k = 8, m = rows * world;
  const size_t shard = (size_t)(rows * k) * 4;
  fluxcpp_ag_gemm_t op = NULL;
  void* buf = NULL;
  float *w = alloc((size_t)(n * k) * 4), *bias = alloc((size_t)n * 4);
  float *out = alloc((size_t)(m * n) * 4), *gathered = alloc(shard * world);
  float* ref = alloc(shard * world);
  fill(w, n * k, rank, 0, 2, 1);
  fill(bias, n, rank, 0, 3, 0);
  CHECK(fluxcpp_ag_gemm_create(ctx, m, n, k, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, &op) ==
            FLUXCPP_SUCCESS,
        "ag_gemm create: %s", fluxcpp_last_error());
  CHECK(fluxcpp_ag_gemm_input_buffer(NULL, &buf) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "ag_gemm: NULL op");
  CHECK(fluxcpp_ag_gemm_input_buffer(op, NULL) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "ag_gemm: NULL buffer");
  for (int call = 0; call < 3; ++call) {
    if (call == 1) {
      check_misuse(fluxcpp_ag_gemm_forward(op, buf, m, w, bias, out, gathered), "ag_gemm");
      continue;
    }
    CHECK(fluxcpp_ag_gemm_input_buffer(op, &buf) == FLUXCPP_SUCCESS && buf != NULL,
          "ag_gemm input_buffer: %s", fluxcpp_last_error());
    fill(buf, rows * k, rank, call, 1, 0);
    MPI_Allgather(buf, (int)shard, MPI_BYTE, ref, (int)shard, MPI_BYTE, MPI_COMM_WORLD);
    CHECK(fluxcpp_ag_gemm_forward(op, buf, m, w, bias, out, gathered) == FLUXCPP_SUCCESS,
          "ag_gemm forward call %d: %s", call, fluxcpp_last_error());
    CHECK(memcmp(gathered, ref, shard * world) == 0, "ag_gemm call %d: gathered_input differs",
          call);
    CHECK(gemm_exact(ref, w, bias, out, m, n, k), "ag_gemm call %d: output differs", call);
  }
  CHECK(fluxcpp_ag_gemm_destroy(op) == FLUXCPP_SUCCESS, "ag_gemm destroy");
  free(w), free(bias), free(out), free(gathered), free(ref);
}

/* Rank s sends (s + t + call) % 3 rows to rank t (zeros included). */
static int64_t split(int s, int t, int call) {
  return (s + t + call) % 3;
}

static void all_to_all_single(fluxcpp_context_t ctx) {
  const int64_t n = 8, max_rows = 2 * world;
  const size_t row = (size_t)n * 4;
  fluxcpp_all_to_all_single_t op = NULL;
  void* buf = NULL;
  int64_t* in_splits = alloc(sizeof(int64_t) * world);
  int64_t* out_splits = alloc(sizeof(int64_t) * world);
  int *sc = alloc(sizeof(int) * world), *sd = alloc(sizeof(int) * world);
  int *rc = alloc(sizeof(int) * world), *rd = alloc(sizeof(int) * world);
  float *out = alloc(row * max_rows), *ref = alloc(row * max_rows);
  CHECK(fluxcpp_all_to_all_single_create(ctx, max_rows, n, FLUXCPP_FLOAT32, &op) == FLUXCPP_SUCCESS,
        "all_to_all_single create: %s", fluxcpp_last_error());
  CHECK(fluxcpp_all_to_all_single_input_buffer(NULL, &buf) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "all_to_all_single: NULL op");
  CHECK(fluxcpp_all_to_all_single_input_buffer(op, NULL) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "all_to_all_single: NULL buffer");
  for (int call = 0; call < 3; ++call) {
    int64_t in_rows = 0, out_rows = 0;
    for (int t = 0; t < world; ++t) {
      in_splits[t] = split(rank, t, call);
      out_splits[t] = split(t, rank, call);
      sc[t] = (int)(in_splits[t] * (int64_t)row), sd[t] = (int)(in_rows * (int64_t)row);
      rc[t] = (int)(out_splits[t] * (int64_t)row), rd[t] = (int)(out_rows * (int64_t)row);
      in_rows += in_splits[t], out_rows += out_splits[t];
    }
    if (call == 1) {
      check_misuse(fluxcpp_all_to_all_single_forward(op, buf, in_splits, out, out_splits),
                   "all_to_all_single");
      continue;
    }
    CHECK(fluxcpp_all_to_all_single_input_buffer(op, &buf) == FLUXCPP_SUCCESS && buf != NULL,
          "all_to_all_single input_buffer: %s", fluxcpp_last_error());
    fill(buf, in_rows * n, rank, call, 1, 0);
    MPI_Alltoallv(buf, sc, sd, MPI_BYTE, ref, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
    CHECK(fluxcpp_all_to_all_single_forward(op, buf, in_splits, out, out_splits) == FLUXCPP_SUCCESS,
          "all_to_all_single forward call %d: %s", call, fluxcpp_last_error());
    CHECK(memcmp(out, ref, row * (size_t)out_rows) == 0, "all_to_all_single call %d differs", call);
  }
  CHECK(fluxcpp_all_to_all_single_destroy(op) == FLUXCPP_SUCCESS, "all_to_all_single destroy");
  free(in_splits), free(out_splits), free(sc), free(sd), free(rc), free(rd), free(out), free(ref);
}

static void a2a_gemm(fluxcpp_context_t ctx) {
  const int64_t rows = 3, n = 5, k = 8, m = rows * world;
  const size_t blk = (size_t)(rows * k) * 4;
  fluxcpp_a2a_gemm_t op = NULL;
  void* buf = NULL;
  float *w = alloc((size_t)(n * k) * 4), *bias = alloc((size_t)n * 4);
  float *out = alloc((size_t)(m * n) * 4), *a2a = alloc(blk * world), *ref = alloc(blk * world);
  fill(w, n * k, rank, 0, 2, 1);
  fill(bias, n, rank, 0, 3, 0);
  CHECK(fluxcpp_a2a_gemm_create(ctx, m, n, k, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, 0, &op) ==
            FLUXCPP_SUCCESS,
        "a2a_gemm create: %s", fluxcpp_last_error());
  CHECK(fluxcpp_a2a_gemm_input_buffer(NULL, &buf) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "a2a_gemm: NULL op");
  CHECK(fluxcpp_a2a_gemm_input_buffer(op, NULL) == FLUXCPP_ERROR_INVALID_ARGUMENT,
        "a2a_gemm: NULL buffer");
  for (int call = 0; call < 3; ++call) {
    if (call == 1) {
      check_misuse(fluxcpp_a2a_gemm_forward(op, buf, m, w, bias, out, a2a), "a2a_gemm");
      continue;
    }
    CHECK(fluxcpp_a2a_gemm_input_buffer(op, &buf) == FLUXCPP_SUCCESS && buf != NULL,
          "a2a_gemm input_buffer: %s", fluxcpp_last_error());
    fill(buf, m * k, rank, call, 1, 0);
    MPI_Alltoall(buf, (int)blk, MPI_BYTE, ref, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
    CHECK(fluxcpp_a2a_gemm_forward(op, buf, m, w, bias, out, a2a) == FLUXCPP_SUCCESS,
          "a2a_gemm forward call %d: %s", call, fluxcpp_last_error());
    CHECK(memcmp(a2a, ref, blk * world) == 0, "a2a_gemm call %d: a2a_output differs", call);
    CHECK(gemm_exact(ref, w, bias, out, m, n, k), "a2a_gemm call %d: output differs", call);
  }
  CHECK(fluxcpp_a2a_gemm_destroy(op) == FLUXCPP_SUCCESS, "a2a_gemm destroy");
  free(w), free(bias), free(out), free(a2a), free(ref);
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);
  all_gather(ctx);
  ag_gemm(ctx);
  all_to_all_single(ctx);
  a2a_gemm(ctx);
  return capi_end(ctx, "zero_copy_capi");
}
