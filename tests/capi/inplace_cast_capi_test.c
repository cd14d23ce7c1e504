/* fluxcpp_inplace_cast driven from C99: known results of the contract's cases (ties, overflow,
 * NaN payloads, denormals), round trips over buffers large enough to be split between threads,
 * with no context and with a context of 3 compute threads, and invalid arguments. Prints
 * "inplace_cast_capi: N passed, M failed" on rank 0; exits non-zero on failure. */
#include <fluxcpp/fluxcpp.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"

static int has(const char* text, const char* needle) {
  return text != NULL && strstr(text, needle) != NULL;
}

/* buf = the bytes of in, then cast in place from -> to (n elements), checked. */
static void cast_copy(fluxcpp_context_t ctx, void* buf, const void* in, size_t bytes, int64_t n,
                      fluxcpp_dtype_t from, fluxcpp_dtype_t to, const char* what) {
  memcpy(buf, in, bytes);
  fluxcpp_status_t s = fluxcpp_inplace_cast(ctx, buf, n, from, to);
  CHECK(s == FLUXCPP_SUCCESS, "%s dtype %d -> %d: %s", what, (int)from, (int)to,
        fluxcpp_last_error());
}

/* f32 -> bf16 of bit patterns with known bf16 results (NaNs: quiet, same sign). */
static void known_f32_to_bf16(fluxcpp_context_t ctx, const char* how) {
  static const uint32_t in[] = {0x3f800000u, 0xc0200000u, 0x3f808000u, 0x3f818000u,
                                0x7f7fffffu, 0x7f7f8000u, 0x7f7e8000u, 0x00018000u,
                                0x80000001u, 0xff800000u, 0x7f800001u, 0xff800001u};
  static const uint16_t want[] = {0x3f80, 0xc020, 0x3f80, 0x3f82, 0x7f80, 0x7f80,
                                  0x7f7e, 0x0002, 0x8000, 0xff80, 0x7fc0, 0xffc0};
  const int64_t n = (int64_t)(sizeof in / sizeof in[0]);
  uint32_t buf[sizeof in / sizeof in[0]];
  cast_copy(ctx, buf, in, sizeof in, n, FLUXCPP_FLOAT32, FLUXCPP_BFLOAT16, how);
  const uint16_t* out = (const uint16_t*)(void*)buf;
  for (int64_t i = 0; i < n; ++i)
    CHECK(out[i] == want[i], "%s f32->bf16 of 0x%08x: expected 0x%04x, got 0x%04x", how,
          (unsigned)in[i], (unsigned)want[i], (unsigned)out[i]);
}

/* f64 -> f32 of bit patterns with known f32 results. */
static void known_f64_to_f32(fluxcpp_context_t ctx, const char* how) {
  static const uint64_t in[] = {
      0x47efffffe0000000ull, 0x47effffff0000000ull, 0x47efffffefffffffull,
      0x3690000000000000ull, 0x36a8000000000000ull, 0x8000000000000001ull,
      0x3ff0000010000000ull, 0x3ff0000030000000ull, 0xfff0000000000001ull};
  static const uint32_t want[] = {0x7f7fffffu, 0x7f800000u, 0x7f7fffffu, 0x00000000u, 0x00000002u,
                                  0x80000000u, 0x3f800000u, 0x3f800002u, 0xffc00000u};
  const int64_t n = (int64_t)(sizeof in / sizeof in[0]);
  uint64_t buf[sizeof in / sizeof in[0]];
  cast_copy(ctx, buf, in, sizeof in, n, FLUXCPP_FLOAT64, FLUXCPP_FLOAT32, how);
  const uint32_t* out = (const uint32_t*)(void*)buf;
  for (int64_t i = 0; i < n; ++i) {
    /* A NaN's payload below the quiet bit is not part of the contract. */
    const uint32_t got = (want[i] & 0x7fc00000u) == 0x7fc00000u ? out[i] & 0xffc00000u : out[i];
    CHECK(got == want[i], "%s f64->f32 of 0x%016llx: expected 0x%08x, got 0x%08x", how,
          (unsigned long long)in[i], (unsigned)want[i], (unsigned)out[i]);
  }
}

/* Values exact in the narrow dtype survive narrow -> wide and wide -> narrow unchanged. */
static void round_trips(fluxcpp_context_t ctx, const char* how, int64_t n) {
  float* f = malloc(sizeof(double) * (size_t)n);
  float* want = malloc(sizeof(float) * (size_t)n);
  seed_for(rank, 1, 2);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    want[i] = (float)next_value();
    memcpy(&bits, &want[i], 4);
    bits &= 0xffff0000u; /* exact in bf16 */
    memcpy(&want[i], &bits, 4);
  }
  memcpy(f, want, sizeof(float) * (size_t)n);
  fluxcpp_status_t s = fluxcpp_inplace_cast(ctx, f, n, FLUXCPP_FLOAT32, FLUXCPP_BFLOAT16);
  CHECK(s == FLUXCPP_SUCCESS, "%s f32->bf16 n=%lld: %s", how, (long long)n, fluxcpp_last_error());
  s = fluxcpp_inplace_cast(ctx, f, n, FLUXCPP_BFLOAT16, FLUXCPP_FLOAT32);
  CHECK(s == FLUXCPP_SUCCESS, "%s bf16->f32 n=%lld: %s", how, (long long)n, fluxcpp_last_error());
  CHECK(memcmp(f, want, sizeof(float) * (size_t)n) == 0, "%s f32->bf16->f32 n=%lld changed values",
        how, (long long)n);
  s = fluxcpp_inplace_cast(ctx, f, n, FLUXCPP_FLOAT32, FLUXCPP_FLOAT64);
  CHECK(s == FLUXCPP_SUCCESS, "%s f32->f64 n=%lld: %s", how, (long long)n, fluxcpp_last_error());
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += ((double*)(void*)f)[i] != (double)want[i];
  CHECK(bad == 0, "%s f32->f64 n=%lld: %lld values differ", how, (long long)n, (long long)bad);
  s = fluxcpp_inplace_cast(ctx, f, n, FLUXCPP_FLOAT64, FLUXCPP_FLOAT32);
  CHECK(s == FLUXCPP_SUCCESS, "%s f64->f32 n=%lld: %s", how, (long long)n, fluxcpp_last_error());
  CHECK(memcmp(f, want, sizeof(float) * (size_t)n) == 0, "%s f32->f64->f32 n=%lld changed values",
        how, (long long)n);
  free(f);
  free(want);
}

static void invalid(fluxcpp_context_t ctx, void* data, int64_t count, fluxcpp_dtype_t from,
                    fluxcpp_dtype_t to, const char* needle) {
  fluxcpp_status_t s = fluxcpp_inplace_cast(ctx, data, count, from, to);
  CHECK(s == FLUXCPP_ERROR_INVALID_ARGUMENT, "count=%lld %d->%d gave status %d", (long long)count,
        (int)from, (int)to, (int)s);
  CHECK(has(fluxcpp_last_error(), "inplace_cast") && has(fluxcpp_last_error(), needle),
        "message '%s' does not name '%s'", fluxcpp_last_error(), needle);
}

int main(int argc, char** argv) {
  capi_init(&argc, &argv);
  fluxcpp_context_config_t cfg = capi_config();
  cfg.compute_threads = 3;
  fluxcpp_context_t ctx = capi_context(&cfg);
  fluxcpp_status_t s;

  known_f32_to_bf16(NULL, "ctx=NULL");
  known_f32_to_bf16(ctx, "ctx");
  known_f64_to_f32(NULL, "ctx=NULL");
  known_f64_to_f32(ctx, "ctx");
  round_trips(NULL, "ctx=NULL", 33);
  round_trips(NULL, "ctx=NULL", 1048571);
  round_trips(ctx, "ctx", 1048571);

  float buf[4] = {1, 2, 3, 4};
  invalid(NULL, buf, 4, FLUXCPP_FLOAT32, FLUXCPP_FLOAT32, "from=f32 to=f32");
  invalid(ctx, buf, 4, FLUXCPP_BFLOAT16, FLUXCPP_FLOAT64, "from=bf16 to=f64");
  invalid(NULL, buf, 0, FLUXCPP_FLOAT64, FLUXCPP_BFLOAT16, "from=f64 to=bf16");
  invalid(NULL, buf, 4, (fluxcpp_dtype_t)9, FLUXCPP_FLOAT32, "from=9");
  invalid(NULL, buf, -5, FLUXCPP_FLOAT32, FLUXCPP_BFLOAT16, "count=-5");
  invalid(ctx, NULL, 3, FLUXCPP_FLOAT32, FLUXCPP_FLOAT64, "data is NULL");
  CHECK(buf[0] == 1 && buf[1] == 2 && buf[2] == 3 && buf[3] == 4,
        "a rejected call wrote to the buffer");
  s = fluxcpp_inplace_cast(NULL, NULL, 0, FLUXCPP_FLOAT32, FLUXCPP_BFLOAT16);
  CHECK(s == FLUXCPP_SUCCESS, "count=0 with NULL data: %s", fluxcpp_last_error());

  return capi_end(ctx, "inplace_cast_capi");
}
