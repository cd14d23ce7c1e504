/* The all-to-all C ABI ops driven from C99:
 *  - all_to_all_single, uneven splits with zeros among them, bit for bit against MPI_Alltoallv;
 *  - a2a_gemm against MPI_Alltoall plus a naive triple loop in double;
 *  - gemm_a2a_transpose and a2a_transpose_gemm against the per-index formulas of API.md over
 *    MPI_Allgather of every rank's inputs;
 * in f32, f64, bf16 -> f32 and bf16, then invalid arguments (every rank gets
 * FLUXCPP_ERROR_INVALID_ARGUMENT and a message naming the op) and a good forward after them.
 * Prints "a2a_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

/* ---- dtypes: f32, f64 and bf16 (the upper 16 bits of an f32, rounded to nearest even) ----- */

static size_t esz(fluxcpp_dtype_t dt) {
  return dt == FLUXCPP_FLOAT64 ? 8 : dt == FLUXCPP_FLOAT32 ? 4 : 2;
}

static const char* dt_name(fluxcpp_dtype_t dt) {
  return dt == FLUXCPP_FLOAT64 ? "f64" : dt == FLUXCPP_FLOAT32 ? "f32" : "bf16";
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even; the values here are finite */
  return (uint16_t)(u >> 16);
}

static double from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return (double)f;
}

static void put(void* buf, fluxcpp_dtype_t dt, int64_t i, double v) {
  if (dt == FLUXCPP_BFLOAT16)
    ((uint16_t*)buf)[i] = to_bf16((float)v);
  else
    store(buf, dt, i, v);
}

static double get(const void* buf, fluxcpp_dtype_t dt, int64_t i) {
  return dt == FLUXCPP_BFLOAT16 ? from_bf16(((const uint16_t*)buf)[i]) : load(buf, dt, i);
}

/* count values in [-1, 1) from the stream of (owner, call, salt). */
static void fill(void* buf, fluxcpp_dtype_t dt, int64_t count, int owner, int call, int salt) {
  seed_for(owner, call, salt);
  for (int64_t i = 0; i < count; ++i) put(buf, dt, i, next_value());
}

static void* alloc(size_t bytes) {
  return malloc(bytes > 0 ? bytes : 1);
}

/* got against the double reference acc of `terms` products whose magnitudes sum to mag:
 * accumulation in f32 (f64 for f64) over the terms, plus one rounding to the output dtype. */
static int close_enough(double got, double acc, double mag, int64_t terms, fluxcpp_dtype_t in_dt,
                        fluxcpp_dtype_t out_dt) {
  const double eps = in_dt == FLUXCPP_FLOAT64 ? 1.0 / 281474976710656.0 /* 2^-48 */
                                              : 1.0 / 1048576.0 /* 2^-20 */;
  double tol = eps * (double)(terms + 2) * mag + 1e-30;
  if (out_dt == FLUXCPP_BFLOAT16) tol += (absd(acc) + tol) / 256.0; /* 2^-8: bf16's half ulp */
  return absd(got - acc) <= tol;
}

static const struct {
  fluxcpp_dtype_t in, out;
} kPairs[] = {{FLUXCPP_FLOAT32, FLUXCPP_FLOAT32},
              {FLUXCPP_FLOAT64, FLUXCPP_FLOAT64},
              {FLUXCPP_BFLOAT16, FLUXCPP_FLOAT32},
              {FLUXCPP_BFLOAT16, FLUXCPP_BFLOAT16}};
enum { kNumPairs = sizeof(kPairs) / sizeof(kPairs[0]) };

/* ---- all_to_all_single ------------------------------------------------------------------- */

/* Rows rank s sends to rank t on a given call: 0..4, uneven, with zeros among them (call 0 of
 * a single rank sends nothing at all). */
static int64_t split_rows(int s, int t, int call) {
  return (3 * s + 5 * t + 2 * call) % 5;
}

/* Runs one forward with the given splits and compares the output with MPI_Alltoallv, bit for
 * bit, and a guard row after it untouched. */
static void a2a_single_once(fluxcpp_all_to_all_single_t op, fluxcpp_dtype_t dt, int64_t n,
                            const int64_t* in_splits, const int64_t* out_splits, int call, void* in,
                            void* out, void* ref) {
  const size_t row = esz(dt) * (size_t)n;
  int* counts = (int*)malloc(sizeof(int) * 4 * (size_t)world);
  int *sc = counts, *sd = counts + world, *rc = counts + 2 * world, *rd = counts + 3 * world;
  int64_t rows_in = 0, rows_out = 0;
  for (int t = 0; t < world; ++t) {
    sc[t] = (int)(in_splits[t] * (int64_t)row);
    sd[t] = (int)(rows_in * (int64_t)row);
    rows_in += in_splits[t];
    rc[t] = (int)(out_splits[t] * (int64_t)row);
    rd[t] = (int)(rows_out * (int64_t)row);
    rows_out += out_splits[t];
  }
  fill(in, dt, rows_in * n, rank, call, 1);
  memset(out, 0xEE, row * (size_t)(rows_out + 1));
  fluxcpp_status_t s = fluxcpp_all_to_all_single_forward(op, in, in_splits, out, out_splits);
  CHECK(s == FLUXCPP_SUCCESS, "%s all_to_all_single call %d: %s", dt_name(dt), call,
        fluxcpp_last_error());
  MPI_Alltoallv(in, sc, sd, MPI_BYTE, ref, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
  int bad_row = -1;
  for (int64_t i = 0; i < rows_out && bad_row < 0; ++i)
    if (memcmp((char*)out + i * row, (char*)ref + i * row, row) != 0) bad_row = (int)i;
  CHECK(bad_row < 0,
        "%s all_to_all_single call %d: output row %d of %lld differs from MPI_Alltoallv",
        dt_name(dt), call, bad_row, (long long)rows_out);
  CHECK(untouched(out, (size_t)rows_out * row, (size_t)(rows_out + 1) * row, 0xEE),
        "%s all_to_all_single call %d: wrote past %lld output rows", dt_name(dt), call,
        (long long)rows_out);
  free(counts);
}

static void test_all_to_all_single(fluxcpp_context_t ctx, fluxcpp_dtype_t dt) {
  const char* op_name = "all_to_all_single";
  const int64_t n = 6, max_rows = 5 * (int64_t)world; /* sums are at most 4W (+1 below) */
  fluxcpp_all_to_all_single_t op = NULL;
  fluxcpp_status_t s = fluxcpp_all_to_all_single_create(ctx, max_rows, n, dt, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s all_to_all_single_create: %s", dt_name(dt),
        fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS || op == NULL) return; /* uniform: create fails on every rank */

  /* Room for W * (max_rows + 1) rows (+ a guard row), so that even the too-large call below stays
   * in bounds should the op read before validating. */
  const size_t cap = esz(dt) * (size_t)n * (size_t)(world * (max_rows + 1) + 1);
  void* in = alloc(cap);
  void* out = alloc(cap);
  void* ref = alloc(cap);
  int64_t* in_splits = (int64_t*)malloc(sizeof(int64_t) * (size_t)world);
  int64_t* out_splits = (int64_t*)malloc(sizeof(int64_t) * (size_t)world);

  for (int call = 0; call < 3; ++call) {
    for (int t = 0; t < world; ++t) {
      in_splits[t] = split_rows(rank, t, call);
      out_splits[t] = split_rows(t, rank, call);
    }
    a2a_single_once(op, dt, n, in_splits, out_splits, call, in, out, ref);
  }

  /* Invalid arguments. */
  for (int t = 0; t < world; ++t) {
    in_splits[t] = split_rows(rank, t, 1);
    out_splits[t] = split_rows(t, rank, 1);
  }
  if (world > 1) {
    out_splits[1] += rank == 0 ? 1 : 0; /* rank 1 does not send rank 0 that extra row */
    s = fluxcpp_all_to_all_single_forward(op, in, in_splits, out, out_splits);
    EXPECT_INVALID(s, op_name, "mismatched splits");
    out_splits[1] -= rank == 0 ? 1 : 0;
  }
  {
    int64_t* big_in = (int64_t*)malloc(sizeof(int64_t) * (size_t)world);
    int64_t* big_out = (int64_t*)malloc(sizeof(int64_t) * (size_t)world);
    for (int t = 0; t < world; ++t)
      big_in[t] = big_out[t] = max_rows + 1; /* consistent, too many */
    s = fluxcpp_all_to_all_single_forward(op, in, big_in, out, big_out);
    EXPECT_INVALID(s, op_name, "sum of splits > max_rows");
    for (int t = 0; t < world; ++t) big_in[t] = big_out[t] = 0;
    big_in[(rank + 1) % world] = -1; /* consistent: rank r receives -1 rows from r - 1 */
    big_out[(rank + world - 1) % world] = -1;
    s = fluxcpp_all_to_all_single_forward(op, in, big_in, out, big_out);
    EXPECT_INVALID(s, op_name, "negative split");
    free(big_in);
    free(big_out);
  }
  s = fluxcpp_all_to_all_single_forward(op, in, NULL, out, out_splits);
  EXPECT_INVALID(s, op_name, "NULL input_splits");

  /* Still usable. */
  a2a_single_once(op, dt, n, in_splits, out_splits, 1, in, out, ref);

  CHECK(fluxcpp_all_to_all_single_destroy(op) == FLUXCPP_SUCCESS, "all_to_all_single_destroy: %s",
        fluxcpp_last_error());
  free(in), free(out), free(ref), free(in_splits), free(out_splits);
}

/* ---- a2a_gemm ---------------------------------------------------------------------------- */

/* One forward of m = rows * W rows: output (and a2a_output when with_extras) against
 * MPI_Alltoall and a naive GEMM in double. */
static void a2a_gemm_once(fluxcpp_a2a_gemm_t op, fluxcpp_dtype_t in_dt, fluxcpp_dtype_t out_dt,
                          int transpose_weight, int64_t rows, int64_t n, int64_t k, int call) {
  const int64_t m = rows * world;
  const size_t ie = esz(in_dt), oe = esz(out_dt);
  const int with_extras = call % 2 == 0; /* bias and a2a_output on even calls */
  void* in = alloc(ie * (size_t)(m * k));
  void* w = alloc(ie * (size_t)(n * k));
  void* bias = alloc(oe * (size_t)n);
  void* out = alloc(oe * (size_t)(m * n + 1)); /* one guard element */
  void* a2a = alloc(ie * (size_t)(m * k));
  void* ref_a2a = alloc(ie * (size_t)(m * k));

  fill(in, in_dt, m * k, rank, call, 1);
  fill(w, in_dt, n * k, rank, call, 2); /* each rank its own weight */
  fill(bias, out_dt, n, rank, call, 3);
  memset(out, 0xFF, oe * (size_t)(m * n + 1)); /* NaN: unwritten elements fail */
  memset(a2a, 0xEE, ie * (size_t)(m * k));

  fluxcpp_status_t s = fluxcpp_a2a_gemm_forward(op, in, m, w, with_extras ? bias : NULL, out,
                                                with_extras ? a2a : NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s->%s a2a_gemm call %d: %s", dt_name(in_dt), dt_name(out_dt), call,
        fluxcpp_last_error());
  const int block = (int)(ie * (size_t)(rows * k));
  MPI_Alltoall(in, block, MPI_BYTE, ref_a2a, block, MPI_BYTE, MPI_COMM_WORLD);
  if (with_extras)
    CHECK(memcmp(a2a, ref_a2a, ie * (size_t)(m * k)) == 0,
          "%s->%s a2a_gemm call %d: a2a_output differs from MPI_Alltoall", dt_name(in_dt),
          dt_name(out_dt), call);

  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0, mag = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        double p = get(ref_a2a, in_dt, i * k + l) *
                   get(w, in_dt, transpose_weight ? l * n + j : j * k + l);
        acc += p;
        mag += absd(p);
      }
      if (with_extras) {
        acc += get(bias, out_dt, j);
        mag += absd(get(bias, out_dt, j));
      }
      double got = get(out, out_dt, i * n + j);
      if (!close_enough(got, acc, mag, k, in_dt, out_dt)) {
        if (bad < 4)
          fprintf(
              stderr, "[rank %d] %s->%s a2a_gemm call %d: [%lld][%lld] expected %.10g, got %.10g\n",
              rank, dt_name(in_dt), dt_name(out_dt), call, (long long)i, (long long)j, acc, got);
        ++bad;
      }
    }
  CHECK(bad == 0,
        "%s->%s a2a_gemm call %d (transpose_weight=%d): %d of %lld elements out of tolerance",
        dt_name(in_dt), dt_name(out_dt), call, transpose_weight, bad, (long long)(m * n));
  CHECK(untouched(out, oe * (size_t)(m * n), oe * (size_t)(m * n + 1), 0xFF),
        "%s->%s a2a_gemm call %d: wrote past the output", dt_name(in_dt), dt_name(out_dt), call);

  free(in), free(w), free(bias), free(out), free(a2a), free(ref_a2a);
}

static void test_a2a_gemm(fluxcpp_context_t ctx, fluxcpp_dtype_t in_dt, fluxcpp_dtype_t out_dt,
                          int transpose_weight) {
  const char* op_name = "a2a_gemm";
  const int64_t rows = 3, n = 13, k = 37, max_m = rows * world;
  fluxcpp_a2a_gemm_t op = NULL;
  fluxcpp_status_t s =
      fluxcpp_a2a_gemm_create(ctx, max_m, n, k, in_dt, out_dt, transpose_weight, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s->%s a2a_gemm_create: %s", dt_name(in_dt),
        dt_name(out_dt), fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS || op == NULL) return;

  a2a_gemm_once(op, in_dt, out_dt, transpose_weight, rows, n, k, 0);
  a2a_gemm_once(op, in_dt, out_dt, transpose_weight, 1, n, k, 1); /* m below max_m */

  /* Invalid arguments; buffers large enough for any m tried. */
  const size_t ie = esz(in_dt), oe = esz(out_dt);
  const int64_t big = (rows + 1) * world;
  void* in = calloc((size_t)(big * k), ie);
  void* w = calloc((size_t)(n * k), ie);
  void* out = calloc((size_t)(big * n), oe);
  if (world > 1) {
    s = fluxcpp_a2a_gemm_forward(op, in, world + 1, w, NULL, out, NULL);
    EXPECT_INVALID(s, op_name, "m %% W != 0");
    s = fluxcpp_a2a_gemm_forward(op, in, rank == 0 ? 2 * world : max_m, w, NULL, out, NULL);
    EXPECT_INVALID(s, op_name, "m differing on rank 0");
  }
  s = fluxcpp_a2a_gemm_forward(op, in, big, w, NULL, out, NULL);
  EXPECT_INVALID(s, op_name, "m > max_m");
  s = fluxcpp_a2a_gemm_forward(op, in, max_m, rank == world - 1 ? NULL : w, NULL, out, NULL);
  EXPECT_INVALID(s, op_name, "NULL weight on the last rank");
  s = fluxcpp_a2a_gemm_forward(op, NULL, 0, NULL, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "a2a_gemm m == 0 is a no-op: %s", fluxcpp_last_error());
  free(in), free(w), free(out);

  /* Still usable. */
  a2a_gemm_once(op, in_dt, out_dt, transpose_weight, rows, n, k, 2);

  CHECK(fluxcpp_a2a_gemm_destroy(op) == FLUXCPP_SUCCESS, "a2a_gemm_destroy: %s",
        fluxcpp_last_error());
}

/* ---- gemm_a2a_transpose ------------------------------------------------------------------ */

/* One forward of global sequence seq: output_r[b][h][t][d] =
 * y_{t / (seq/W)}[b][t % (seq/W)][(r*nheads/W + h)*head_dim + d], y_s = input_s · weight_sᵀ +
 * bias_s, from every rank's input, weight and bias gathered with MPI_Allgather. */
static void gat_once(fluxcpp_gemm_a2a_transpose_t op, fluxcpp_dtype_t in_dt, fluxcpp_dtype_t out_dt,
                     int64_t bs, int64_t seq, int64_t hidden, int64_t nheads, int64_t hd,
                     int call) {
  const size_t ie = esz(in_dt), oe = esz(out_dt);
  const int64_t sl = seq / world, hpr = nheads / world, cols = nheads * hd;
  const int64_t in_count = bs * sl * hidden, w_count = cols * hidden;
  const int64_t out_count = bs * hpr * seq * hd;
  const int with_bias = call % 2 == 0;
  void* in = alloc(ie * (size_t)in_count);
  void* w = alloc(ie * (size_t)w_count);
  void* bias = alloc(oe * (size_t)cols);
  void* out = alloc(oe * (size_t)(out_count + 1)); /* one guard element */
  void* all_in = alloc(ie * (size_t)(in_count * world));
  void* all_w = alloc(ie * (size_t)(w_count * world));
  void* all_bias = alloc(oe * (size_t)(cols * world));

  fill(in, in_dt, in_count, rank, call, 11);
  fill(w, in_dt, w_count, rank, call, 12);
  fill(bias, out_dt, cols, rank, call, 13);
  memset(out, 0xFF, oe * (size_t)(out_count + 1));

  fluxcpp_status_t s =
      fluxcpp_gemm_a2a_transpose_forward(op, in, bs, seq, w, with_bias ? bias : NULL, out);
  CHECK(s == FLUXCPP_SUCCESS, "%s->%s gemm_a2a_transpose call %d: %s", dt_name(in_dt),
        dt_name(out_dt), call, fluxcpp_last_error());
  MPI_Allgather(in, (int)(ie * (size_t)in_count), MPI_BYTE, all_in, (int)(ie * (size_t)in_count),
                MPI_BYTE, MPI_COMM_WORLD);
  MPI_Allgather(w, (int)(ie * (size_t)w_count), MPI_BYTE, all_w, (int)(ie * (size_t)w_count),
                MPI_BYTE, MPI_COMM_WORLD);
  MPI_Allgather(bias, (int)(oe * (size_t)cols), MPI_BYTE, all_bias, (int)(oe * (size_t)cols),
                MPI_BYTE, MPI_COMM_WORLD);

  int bad = 0;
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t h = 0; h < hpr; ++h)
      for (int64_t t = 0; t < seq; ++t)
        for (int64_t d = 0; d < hd; ++d) {
          const int64_t src = t / sl, tl = t % sl, col = (rank * hpr + h) * hd + d;
          const char* x = (const char*)all_in + ie * (size_t)(src * in_count);
          const char* ws = (const char*)all_w + ie * (size_t)(src * w_count);
          double acc = 0.0, mag = 0.0;
          for (int64_t l = 0; l < hidden; ++l) {
            double p = get(x, in_dt, (b * sl + tl) * hidden + l) * get(ws, in_dt, col * hidden + l);
            acc += p;
            mag += absd(p);
          }
          if (with_bias) {
            double bv = get(all_bias, out_dt, src * cols + col);
            acc += bv;
            mag += absd(bv);
          }
          const int64_t o = ((b * hpr + h) * seq + t) * hd + d;
          double got = get(out, out_dt, o);
          if (!close_enough(got, acc, mag, hidden, in_dt, out_dt)) {
            if (bad < 4)
              fprintf(
                  stderr,
                  "[rank %d] %s->%s gemm_a2a_transpose call %d: [b=%lld][h=%lld][t=%lld][d=%lld] "
                  "expected %.10g, got %.10g\n",
                  rank, dt_name(in_dt), dt_name(out_dt), call, (long long)b, (long long)h,
                  (long long)t, (long long)d, acc, got);
            ++bad;
          }
        }
  CHECK(bad == 0,
        "%s->%s gemm_a2a_transpose call %d (bs=%lld seq=%lld): %d of %lld out of tolerance",
        dt_name(in_dt), dt_name(out_dt), call, (long long)bs, (long long)seq, bad,
        (long long)out_count);
  CHECK(untouched(out, oe * (size_t)out_count, oe * (size_t)(out_count + 1), 0xFF),
        "%s->%s gemm_a2a_transpose call %d: wrote past the output", dt_name(in_dt), dt_name(out_dt),
        call);

  free(in), free(w), free(bias), free(out), free(all_in), free(all_w), free(all_bias);
}

static void test_gemm_a2a_transpose(fluxcpp_context_t ctx, fluxcpp_dtype_t in_dt,
                                    fluxcpp_dtype_t out_dt) {
  const char* op_name = "gemm_a2a_transpose";
  const int64_t max_bs = 2, max_seq = 4 * world, hidden = 24, nheads = 2 * world, hd = 5;
  fluxcpp_gemm_a2a_transpose_t op = NULL;
  fluxcpp_status_t s = fluxcpp_gemm_a2a_transpose_create(ctx, max_bs, max_seq, hidden, nheads, hd,
                                                         in_dt, out_dt, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s->%s gemm_a2a_transpose_create: %s", dt_name(in_dt),
        dt_name(out_dt), fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS || op == NULL) return;

  gat_once(op, in_dt, out_dt, max_bs, max_seq, hidden, nheads, hd, 0);
  gat_once(op, in_dt, out_dt, 1, 2 * world, hidden, nheads, hd, 1); /* below the maxima */

  /* Invalid arguments; buffers large enough for any shape tried. */
  const size_t ie = esz(in_dt), oe = esz(out_dt);
  const int64_t big = (max_bs + 1) * (max_seq + world) * hidden * nheads * hd;
  void* in = calloc((size_t)big, ie);
  void* w = calloc((size_t)(nheads * hd * hidden), ie);
  void* out = calloc((size_t)big, oe);
  if (world > 1) {
    s = fluxcpp_gemm_a2a_transpose_forward(op, in, max_bs, world + 1, w, NULL, out);
    EXPECT_INVALID(s, op_name, "seq %% W != 0");
    s = fluxcpp_gemm_a2a_transpose_forward(op, in, rank == 0 ? 1 : max_bs, max_seq, w, NULL, out);
    EXPECT_INVALID(s, op_name, "bs differing on rank 0");
  }
  s = fluxcpp_gemm_a2a_transpose_forward(op, in, max_bs + 1, max_seq, w, NULL, out);
  EXPECT_INVALID(s, op_name, "bs > max_bs");
  s = fluxcpp_gemm_a2a_transpose_forward(op, in, max_bs, max_seq + world, w, NULL, out);
  EXPECT_INVALID(s, op_name, "seq > max_seq");
  s = fluxcpp_gemm_a2a_transpose_forward(op, in, max_bs, max_seq, rank == world - 1 ? NULL : w,
                                         NULL, out);
  EXPECT_INVALID(s, op_name, "NULL weight on the last rank");
  s = fluxcpp_gemm_a2a_transpose_forward(op, NULL, 0, max_seq, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "gemm_a2a_transpose bs == 0 is a no-op: %s", fluxcpp_last_error());
  free(in), free(w), free(out);

  /* Still usable. */
  gat_once(op, in_dt, out_dt, max_bs, max_seq, hidden, nheads, hd, 2);

  CHECK(fluxcpp_gemm_a2a_transpose_destroy(op) == FLUXCPP_SUCCESS, "gemm_a2a_transpose_destroy: %s",
        fluxcpp_last_error());
}

/* ---- a2a_transpose_gemm ------------------------------------------------------------------ */

/* One forward of global sequence seq: a2a_output_r[b][t][(s*nheads/W + h)*head_dim + d] =
 * input_s[b][h][r*seq/W + t][d] (bit for bit, from MPI_Allgather of every rank's input), and
 * output = a2a_output · weightᵀ + bias against a naive GEMM in double. */
static void atg_once(fluxcpp_a2a_transpose_gemm_t op, fluxcpp_dtype_t in_dt, fluxcpp_dtype_t out_dt,
                     int64_t bs, int64_t seq, int64_t nheads, int64_t hd, int64_t n, int call) {
  const size_t ie = esz(in_dt), oe = esz(out_dt);
  const int64_t sl = seq / world, hpr = nheads / world, k = nheads * hd;
  const int64_t in_count = bs * hpr * seq * hd, a2a_count = bs * sl * k, out_count = bs * sl * n;
  const int with_extras = call % 2 == 0; /* bias and a2a_output on even calls */
  void* in = alloc(ie * (size_t)in_count);
  void* w = alloc(ie * (size_t)(n * k));
  void* bias = alloc(oe * (size_t)n);
  void* out = alloc(oe * (size_t)(out_count + 1)); /* one guard element */
  void* a2a = alloc(ie * (size_t)a2a_count);
  void* ref_a2a = alloc(ie * (size_t)a2a_count);
  void* all_in = alloc(ie * (size_t)(in_count * world));

  fill(in, in_dt, in_count, rank, call, 21);
  fill(w, in_dt, n * k, rank, call, 22);
  fill(bias, out_dt, n, rank, call, 23);
  memset(out, 0xFF, oe * (size_t)(out_count + 1));
  memset(a2a, 0xEE, ie * (size_t)a2a_count);

  fluxcpp_status_t s = fluxcpp_a2a_transpose_gemm_forward(
      op, in, bs, seq, w, with_extras ? bias : NULL, out, with_extras ? a2a : NULL);
  CHECK(s == FLUXCPP_SUCCESS, "%s->%s a2a_transpose_gemm call %d: %s", dt_name(in_dt),
        dt_name(out_dt), call, fluxcpp_last_error());
  MPI_Allgather(in, (int)(ie * (size_t)in_count), MPI_BYTE, all_in, (int)(ie * (size_t)in_count),
                MPI_BYTE, MPI_COMM_WORLD);
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t t = 0; t < sl; ++t)
      for (int src = 0; src < world; ++src)
        for (int64_t h = 0; h < hpr; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            const int64_t to = (b * sl + t) * k + (src * hpr + h) * hd + d;
            const int64_t from = src * in_count + ((b * hpr + h) * seq + rank * sl + t) * hd + d;
            memcpy((char*)ref_a2a + ie * (size_t)to, (const char*)all_in + ie * (size_t)from, ie);
          }
  if (with_extras)
    CHECK(memcmp(a2a, ref_a2a, ie * (size_t)a2a_count) == 0,
          "%s->%s a2a_transpose_gemm call %d: a2a_output differs from the formula", dt_name(in_dt),
          dt_name(out_dt), call);

  int bad = 0;
  for (int64_t i = 0; i < bs * sl; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0, mag = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        double p = get(ref_a2a, in_dt, i * k + l) * get(w, in_dt, j * k + l);
        acc += p;
        mag += absd(p);
      }
      if (with_extras) {
        acc += get(bias, out_dt, j);
        mag += absd(get(bias, out_dt, j));
      }
      double got = get(out, out_dt, i * n + j);
      if (!close_enough(got, acc, mag, k, in_dt, out_dt)) {
        if (bad < 4)
          fprintf(stderr,
                  "[rank %d] %s->%s a2a_transpose_gemm call %d: [row %lld][%lld] expected %.10g, "
                  "got %.10g\n",
                  rank, dt_name(in_dt), dt_name(out_dt), call, (long long)i, (long long)j, acc,
                  got);
        ++bad;
      }
    }
  CHECK(bad == 0,
        "%s->%s a2a_transpose_gemm call %d (bs=%lld seq=%lld): %d of %lld out of tolerance",
        dt_name(in_dt), dt_name(out_dt), call, (long long)bs, (long long)seq, bad,
        (long long)out_count);
  CHECK(untouched(out, oe * (size_t)out_count, oe * (size_t)(out_count + 1), 0xFF),
        "%s->%s a2a_transpose_gemm call %d: wrote past the output", dt_name(in_dt), dt_name(out_dt),
        call);

  free(in), free(w), free(bias), free(out), free(a2a), free(ref_a2a), free(all_in);
}

static void test_a2a_transpose_gemm(fluxcpp_context_t ctx, fluxcpp_dtype_t in_dt,
                                    fluxcpp_dtype_t out_dt) {
  const char* op_name = "a2a_transpose_gemm";
  const int64_t max_bs = 2, max_seq = 4 * world, nheads = 2 * world, hd = 5, n = 12;
  fluxcpp_a2a_transpose_gemm_t op = NULL;
  fluxcpp_status_t s =
      fluxcpp_a2a_transpose_gemm_create(ctx, max_bs, max_seq, nheads, hd, n, in_dt, out_dt, &op);
  CHECK(s == FLUXCPP_SUCCESS && op != NULL, "%s->%s a2a_transpose_gemm_create: %s", dt_name(in_dt),
        dt_name(out_dt), fluxcpp_last_error());
  if (s != FLUXCPP_SUCCESS || op == NULL) return;

  atg_once(op, in_dt, out_dt, max_bs, max_seq, nheads, hd, n, 0);
  atg_once(op, in_dt, out_dt, 1, 2 * world, nheads, hd, n, 1); /* below the maxima */

  /* Invalid arguments; buffers large enough for any shape tried. */
  const size_t ie = esz(in_dt), oe = esz(out_dt);
  const int64_t big = (max_bs + 1) * (max_seq + world) * nheads * hd * n;
  void* in = calloc((size_t)big, ie);
  void* w = calloc((size_t)(n * nheads * hd), ie);
  void* out = calloc((size_t)big, oe);
  if (world > 1) {
    s = fluxcpp_a2a_transpose_gemm_forward(op, in, max_bs, world + 1, w, NULL, out, NULL);
    EXPECT_INVALID(s, op_name, "seq %% W != 0");
    s = fluxcpp_a2a_transpose_gemm_forward(op, in, max_bs, rank == 0 ? 2 * world : max_seq, w, NULL,
                                           out, NULL);
    EXPECT_INVALID(s, op_name, "seq differing on rank 0");
  }
  s = fluxcpp_a2a_transpose_gemm_forward(op, in, max_bs + 1, max_seq, w, NULL, out, NULL);
  EXPECT_INVALID(s, op_name, "bs > max_bs");
  s = fluxcpp_a2a_transpose_gemm_forward(op, in, max_bs, max_seq + world, w, NULL, out, NULL);
  EXPECT_INVALID(s, op_name, "seq > max_seq");
  s = fluxcpp_a2a_transpose_gemm_forward(op, in, max_bs, max_seq, w, NULL,
                                         rank == world - 1 ? NULL : out, NULL);
  EXPECT_INVALID(s, op_name, "NULL output on the last rank");
  s = fluxcpp_a2a_transpose_gemm_forward(op, NULL, 0, max_seq, NULL, NULL, NULL, NULL);
  CHECK(s == FLUXCPP_SUCCESS, "a2a_transpose_gemm bs == 0 is a no-op: %s", fluxcpp_last_error());
  free(in), free(w), free(out);

  /* Still usable. */
  atg_once(op, in_dt, out_dt, max_bs, max_seq, nheads, hd, n, 2);

  CHECK(fluxcpp_a2a_transpose_gemm_destroy(op) == FLUXCPP_SUCCESS, "a2a_transpose_gemm_destroy: %s",
        fluxcpp_last_error());
}

/* ---- create-time errors and NULL handles --------------------------------------------------- */

static void test_create_errors(fluxcpp_context_t ctx) {
  const fluxcpp_dtype_t f32 = FLUXCPP_FLOAT32, f64 = FLUXCPP_FLOAT64, bf16 = FLUXCPP_BFLOAT16;
  const fluxcpp_dtype_t bogus = (fluxcpp_dtype_t)7;
  const int64_t W = world;
  fluxcpp_status_t s;

  fluxcpp_all_to_all_single_t a2a = NULL;
  s = fluxcpp_all_to_all_single_create(ctx, 4 * W, 8, f32, NULL);
  EXPECT_INVALID(s, "all_to_all_single", "NULL op out-pointer");
  s = fluxcpp_all_to_all_single_create(ctx, 4 * W, 8, bogus, &a2a);
  EXPECT_INVALID(s, "all_to_all_single", "dtype 7");
  CHECK(a2a == NULL, "all_to_all_single: failed create set the handle");

  fluxcpp_a2a_gemm_t ag = NULL;
  s = fluxcpp_a2a_gemm_create(ctx, 4 * W, 8, 8, f32, f32, 0, NULL);
  EXPECT_INVALID(s, "a2a_gemm", "NULL op out-pointer");
  s = fluxcpp_a2a_gemm_create(ctx, 4 * W, 8, 8, bf16, f64, 0, &ag);
  EXPECT_INVALID(s, "a2a_gemm", "bf16 -> f64");
  s = fluxcpp_a2a_gemm_create(ctx, 4 * W, 8, 8, f32, bf16, 0, &ag);
  EXPECT_INVALID(s, "a2a_gemm", "f32 -> bf16");
  if (world > 1) {
    s = fluxcpp_a2a_gemm_create(ctx, 4 * W, 8, rank == 0 ? 9 : 8, f32, f32, 0, &ag);
    EXPECT_INVALID(s, "a2a_gemm", "k differing on rank 0");
  }
  CHECK(ag == NULL, "a2a_gemm: failed create set the handle");

  fluxcpp_gemm_a2a_transpose_t gat = NULL;
  s = fluxcpp_gemm_a2a_transpose_create(ctx, 2, 4 * W, 16, 2 * W, 4, f32, f32, NULL);
  EXPECT_INVALID(s, "gemm_a2a_transpose", "NULL op out-pointer");
  s = fluxcpp_gemm_a2a_transpose_create(ctx, 2, 4 * W, 16, 2 * W, 4, f64, f32, &gat);
  EXPECT_INVALID(s, "gemm_a2a_transpose", "f64 -> f32");
  if (world > 1) {
    s = fluxcpp_gemm_a2a_transpose_create(ctx, 2, 4 * W, 16, W + 1, 4, f32, f32, &gat);
    EXPECT_INVALID(s, "gemm_a2a_transpose", "nheads %% W != 0");
  }
  CHECK(gat == NULL, "gemm_a2a_transpose: failed create set the handle");

  fluxcpp_a2a_transpose_gemm_t atg = NULL;
  s = fluxcpp_a2a_transpose_gemm_create(ctx, 2, 4 * W, 2 * W, 4, 8, f32, f32, NULL);
  EXPECT_INVALID(s, "a2a_transpose_gemm", "NULL op out-pointer");
  s = fluxcpp_a2a_transpose_gemm_create(ctx, 2, 4 * W, 2 * W, 4, 8, f32, f64, &atg);
  EXPECT_INVALID(s, "a2a_transpose_gemm", "f32 -> f64");
  if (world > 1) {
    s = fluxcpp_a2a_transpose_gemm_create(ctx, 2, 4 * W, W + 1, 4, 8, f32, f32, &atg);
    EXPECT_INVALID(s, "a2a_transpose_gemm", "nheads %% W != 0");
  }
  CHECK(atg == NULL, "a2a_transpose_gemm: failed create set the handle");

  /* NULL handles: forward is an invalid argument, destroy a no-op. */
  int64_t zero = 0;
  CHECK(fluxcpp_all_to_all_single_forward(NULL, NULL, &zero, NULL, &zero) ==
            FLUXCPP_ERROR_INVALID_ARGUMENT,
        "all_to_all_single_forward(NULL handle)");
  CHECK(fluxcpp_a2a_gemm_forward(NULL, NULL, 0, NULL, NULL, NULL, NULL) ==
            FLUXCPP_ERROR_INVALID_ARGUMENT,
        "a2a_gemm_forward(NULL handle)");
  CHECK(fluxcpp_gemm_a2a_transpose_forward(NULL, NULL, 0, 0, NULL, NULL, NULL) ==
            FLUXCPP_ERROR_INVALID_ARGUMENT,
        "gemm_a2a_transpose_forward(NULL handle)");
  CHECK(fluxcpp_a2a_transpose_gemm_forward(NULL, NULL, 0, 0, NULL, NULL, NULL, NULL) ==
            FLUXCPP_ERROR_INVALID_ARGUMENT,
        "a2a_transpose_gemm_forward(NULL handle)");
  CHECK(fluxcpp_all_to_all_single_destroy(NULL) == FLUXCPP_SUCCESS,
        "all_to_all_single_destroy(NULL)");
  CHECK(fluxcpp_a2a_gemm_destroy(NULL) == FLUXCPP_SUCCESS, "a2a_gemm_destroy(NULL)");
  CHECK(fluxcpp_gemm_a2a_transpose_destroy(NULL) == FLUXCPP_SUCCESS,
        "gemm_a2a_transpose_destroy(NULL)");
  CHECK(fluxcpp_a2a_transpose_gemm_destroy(NULL) == FLUXCPP_SUCCESS,
        "a2a_transpose_gemm_destroy(NULL)");
}

int main(int argc, char** argv) {
  fluxcpp_context_t ctx = capi_start(&argc, &argv);
  if (ctx == NULL) return capi_finish("a2a_capi");

  test_all_to_all_single(ctx, FLUXCPP_FLOAT32);
  test_all_to_all_single(ctx, FLUXCPP_FLOAT64);
  test_all_to_all_single(ctx, FLUXCPP_BFLOAT16);
  for (int p = 0; p < kNumPairs; ++p) {
    test_a2a_gemm(ctx, kPairs[p].in, kPairs[p].out, p % 2);
    test_gemm_a2a_transpose(ctx, kPairs[p].in, kPairs[p].out);
    test_a2a_transpose_gemm(ctx, kPairs[p].in, kPairs[p].out);
  }
  test_create_errors(ctx);
  return capi_end(ctx, "a2a_capi");
}
