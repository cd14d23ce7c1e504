/* fluxcpp.h: the C ABI of fluxcpp, compilable as C99 and C++. The contract is docs/api.md.
 *
 * MPI: the entry points that take MPI types (fluxcpp_context_create) are declared in
 * fluxcpp/fluxcpp_mpi.h, which this header includes (and with it <mpi.h>) unless
 * FLUXCPP_NO_MPI is defined before it. Code that makes its contexts without MPI
 * (create_from_id, create_from_store) may define FLUXCPP_NO_MPI and compile without <mpi.h>.
 *
 * Every function returns fluxcpp_status_t; on failure fluxcpp_last_error() (per thread) holds a
 * message naming the op, the argument or peer, and the values. No exception escapes.
 * Collective functions must be called by every rank of the context in the same order with the
 * same shape arguments; if ranks disagree or an argument is invalid, every rank gets
 * FLUXCPP_ERROR_INVALID_ARGUMENT. A handle is used by one thread at a time. */
#ifndef FLUXCPP_FLUXCPP_H_
#define FLUXCPP_FLUXCPP_H_

#include <stddef.h>
#include <stdint.h>

#include "fluxcpp/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  FLUXCPP_SUCCESS = 0,
  FLUXCPP_ERROR_INVALID_ARGUMENT = 1,
  FLUXCPP_ERROR_INVALID_USAGE = 2, /* wrong call order, MPI not initialised, thread level too low */
  FLUXCPP_ERROR_SYSTEM = 3,        /* shm, mmap, threads; message carries errno text */
  FLUXCPP_ERROR_MPI = 4,
  FLUXCPP_ERROR_TIMEOUT = 5, /* a peer did not signal within the timeout */
  FLUXCPP_ERROR_INTERNAL = 6
} fluxcpp_status_t;

/* The ops take FLUXCPP_FLOAT32, FLUXCPP_FLOAT64 and FLUXCPP_BFLOAT16 (each op lists its dtypes);
 * the others are element types of the local helpers fluxcpp_reduce_blocks and fluxcpp_convert
 * only (f16: IEEE binary16; bool: one byte). */
typedef enum {
  FLUXCPP_FLOAT32 = 0,
  FLUXCPP_FLOAT64 = 1,
  FLUXCPP_BFLOAT16 = 2,
  FLUXCPP_FLOAT16 = 3,
  FLUXCPP_INT8 = 4,
  FLUXCPP_UINT8 = 5,
  FLUXCPP_INT16 = 6,
  FLUXCPP_INT32 = 7,
  FLUXCPP_INT64 = 8,
  FLUXCPP_BOOL = 9
} fluxcpp_dtype_t;

FLUXCPP_API const char* fluxcpp_status_string(fluxcpp_status_t status);
/* The message of the last failure on this thread ("" if none). Valid until the next failing
 * fluxcpp call on this thread. */
FLUXCPP_API const char* fluxcpp_last_error(void);
/* major*10000 + minor*100 + patch */
FLUXCPP_API int fluxcpp_version(void);
/* For a caller whose own check of a collective forward's arguments failed on this rank, and
 * which still makes the call (with an invalid m, so that the peers fail at once instead of timing
 * out): `reason` (the caller's words, e.g. "m=20 exceeds max_m=8"; copied) replaces the op's
 * message about those placeholder arguments, and every rank gets FLUXCPP_ERROR_INVALID_ARGUMENT
 * "<op>: rank r refused its own arguments of this call: <reason>". It lasts until the thread's
 * next fluxcpp call that can fail (any but the destroys, fluxcpp_status_string, fluxcpp_last_error
 * and fluxcpp_version), which uses it if that is a collective forward and drops it otherwise;
 * NULL or "" clears it. */
FLUXCPP_API fluxcpp_status_t fluxcpp_refuse_next_call(const char* reason);

/* ---- context ---------------------------------------------------------------------------- */
typedef struct fluxcpp_context_s* fluxcpp_context_t;
typedef struct {
  size_t struct_size;  /* sizeof(fluxcpp_context_config_t) */
  int ranks_per_node;  /* the former name of ranks_per_host below, still read: used when
                          ranks_per_host is 0 (both set and different: INVALID_ARGUMENT) */
  double timeout_s;    /* peer-wait timeout in seconds; 0: FLUXCPP_TIMEOUT_S or the default;
                          INFINITY (or too large for a deadline, e.g. 1e10): wait forever; NaN or
                          negative: FLUXCPP_ERROR_INVALID_ARGUMENT */
  int compute_threads; /* GEMM workers per rank; 0: default */
  int comm_threads;    /* copy/progress threads per rank; 0: default */
  int ranks_per_host;  /* 0: detect hosts; >0: groups of that many consecutive ranks act as one host
                          (a caller built against the struct before this field passes a smaller
                          struct_size: ranks_per_node alone is read) */
} fluxcpp_context_config_t;
#define FLUXCPP_CONTEXT_CONFIG_INIT \
  { sizeof(fluxcpp_context_config_t), 0, 0.0, 0, 0, 0 }

/* fluxcpp_context_create, from an MPI communicator: in fluxcpp/fluxcpp_mpi.h (included at the
 * end of this header unless FLUXCPP_NO_MPI is defined). */
/* Without MPI, ranks on one host (NCCL's convention: ncclGetUniqueId / ncclCommInitRank). One
 * rank makes an id (not collective); the caller moves its 128 bytes, unchanged, to every other
 * rank by any means; every rank then calls create_from_id with that id, the same world_size and
 * its own rank (0 <= rank < world_size, each once). MPI may or may not be initialised: the
 * rendezvous, handshakes, barriers and timeouts run over shared memory, with the failure model
 * of an MPI context (a rank that never arrives: FLUXCPP_ERROR_TIMEOUT naming it). Every op works
 * on such a context. A rank whose host is not the id's gets FLUXCPP_ERROR_INVALID_USAGE (ranks
 * on several hosts: create_from_store below, or MPI); config->ranks_per_host must be 0 or
 * world_size. An id is good for
 * one context. */
typedef struct {
  char internal[128];
} fluxcpp_unique_id_t;
FLUXCPP_API fluxcpp_status_t fluxcpp_get_unique_id(fluxcpp_unique_id_t* id);
FLUXCPP_API fluxcpp_status_t fluxcpp_context_create_from_id(const fluxcpp_unique_id_t* id,
                                                            int world_size, int rank,
                                                            const fluxcpp_context_config_t* config,
                                                            fluxcpp_context_t* ctx);
/* Without MPI, on one host or several (the UCC convention: the caller's out-of-band store, e.g.
 * torch's c10d store, etcd, a file). Every rank calls create_from_store with the same world_size
 * and its own rank, on a store (or key prefix) of the context's own: the keys "fluxcpp/rank/<r>",
 * "fluxcpp/<job>/host/<n>" and "fluxcpp/<job>/net/..." (<job>: rank 0's random nonce) are written
 * under it. The ranks of one machine meet in shared memory (as create_from_id); machines, told
 * apart by their boot id
 * and host name (FLUXCPP_HOST_ID=<name> makes ranks of one machine distinct hosts, for tests),
 * meet over gloo's TCP transport, which then carries every op's traffic between hosts: listening
 * on FLUXCPP_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME) when set, else on the address the host name
 * resolves to. Callbacks return 0 on success, nonzero on failure (create fails with
 * FLUXCPP_ERROR_SYSTEM naming the key); they may be called from the calling thread only, during
 * the create. A rank that never arrives: FLUXCPP_ERROR_TIMEOUT naming it. A timeout on the
 * network (a host lost mid-call) closes the context's TCP channel: every later call on the
 * context fails and it can only be destroyed. config->ranks_per_host = n > 0: the ranks of one
 * machine in consecutive groups of n act as hosts of their own (the same n on every rank, each
 * group on one machine, else FLUXCPP_ERROR_INVALID_ARGUMENT on every rank). */
typedef struct {
  void* user;
  /* Stores `bytes` bytes of `value` under `key`. */
  int (*set)(void* user, const char* key, const void* value, size_t bytes);
  /* Waits until `key` exists: 0 once it does, 1 when timeout_s passed first, any other value
   * when the store failed (create fails with FLUXCPP_ERROR_SYSTEM naming the key). */
  int (*wait)(void* user, const char* key, double timeout_s);
  /* Copies the value of `key` (which exists) into `value` (capacity bytes) and sets *bytes to its
   * size; when it is larger than capacity, copies nothing, sets *bytes and returns 0: the
   * library calls again with a buffer that large. */
  int (*get)(void* user, const char* key, void* value, size_t capacity, size_t* bytes);
} fluxcpp_store_t;
FLUXCPP_API fluxcpp_status_t fluxcpp_context_create_from_store(
    const fluxcpp_store_t* store, int world_size, int rank, const fluxcpp_context_config_t* config,
    fluxcpp_context_t* ctx);
/* Collective; NULL is a no-op. Ops created on the context are not destroyed with it, but once it
 * is closed every forward, input_buffer and async_send_recv call on them returns
 * FLUXCPP_ERROR_INVALID_USAGE "<op>: the context was closed" (grouped_gemm's forward, which is
 * local, still computes on the calling thread; packed weights still update). Each op must still
 * be destroyed: its destroy is then local (no communication) and frees the op's memory. */
FLUXCPP_API fluxcpp_status_t fluxcpp_context_destroy(fluxcpp_context_t ctx);
/* Not collective: *shared = a second handle on ctx's runtime (its ops, threads and buffers), for
 * a framework that owns ctx and lends it (the torch.distributed backend's from_group). Ops may be
 * created on either handle; they use the context one thread at a time, as always. Destroying the
 * shared handle is local and only drops its reference; ctx's own destroy closes the runtime. */
FLUXCPP_API fluxcpp_status_t fluxcpp_context_share(fluxcpp_context_t ctx,
                                                   fluxcpp_context_t* shared);
/* Any of the out pointers may be NULL. */
FLUXCPP_API fluxcpp_status_t fluxcpp_context_info(fluxcpp_context_t ctx, int* rank, int* world_size,
                                                  int* host_rank, int* host_size);

/* ---- all_gather -------------------------------------------------------------------------- */
typedef struct fluxcpp_all_gather_s* fluxcpp_all_gather_t;
/* Collective. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_gather_create(fluxcpp_context_t ctx, int64_t max_m,
                                                       int64_t k, fluxcpp_dtype_t dtype,
                                                       fluxcpp_all_gather_t* op);
/* Collective, blocking. input [m/W, k]; output [m, k], rank s's rows at [s*m/W, (s+1)*m/W).
 * m % W == 0, m <= max_m; m == 0 is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_gather_forward(fluxcpp_all_gather_t op, const void* input,
                                                        int64_t m, void* output);
/* NULL is a no-op. */
/* Zero-copy input (not collective): waits until every peer has finished reading this rank's slot
 * for the previous forward (FLUXCPP_ERROR_TIMEOUT naming the peer otherwise), then sets *buffer
 * to this rank's slot of the op's symmetric buffer: room for the op's largest input on this rank,
 * in the input dtype, at the same address for the op's lifetime. Write this call's input there
 * and pass *buffer as `input`: forward then skips copying it. Call it again before each write.
 * Misuse is an error, never corrupt data: forward with input == *buffer without input_buffer
 * since this rank's previous forward is FLUXCPP_ERROR_INVALID_USAGE on every rank; an input that
 * overlaps the slot without starting at it, or an output that overlaps the op's memory, is
 * FLUXCPP_ERROR_INVALID_ARGUMENT; neither breaks the op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_gather_input_buffer(fluxcpp_all_gather_t op,
                                                             void** buffer);
FLUXCPP_API fluxcpp_status_t fluxcpp_all_gather_destroy(fluxcpp_all_gather_t op);

/* ---- reduce_scatter ---------------------------------------------------------------------- */
typedef struct fluxcpp_reduce_scatter_s* fluxcpp_reduce_scatter_t;
/* Collective. */
FLUXCPP_API fluxcpp_status_t fluxcpp_reduce_scatter_create(fluxcpp_context_t ctx, int64_t max_m,
                                                           int64_t n, fluxcpp_dtype_t dtype,
                                                           fluxcpp_reduce_scatter_t* op);
/* Collective, blocking. input [m, n]; output [m/W, n] = rows [r*m/W, (r+1)*m/W) of the sum over
 * ranks of input. m % W == 0. The sum is taken in a fixed order (bf16 accumulated in f32 and
 * rounded once): results are bitwise identical from call to call and run to run. */
FLUXCPP_API fluxcpp_status_t fluxcpp_reduce_scatter_forward(fluxcpp_reduce_scatter_t op,
                                                            const void* input, int64_t m,
                                                            void* output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_reduce_scatter_destroy(fluxcpp_reduce_scatter_t op);

/* ---- all_reduce -------------------------------------------------------------------------- */
typedef struct fluxcpp_all_reduce_s* fluxcpp_all_reduce_t;
/* Collective. max_count >= 1 elements. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_reduce_create(fluxcpp_context_t ctx, int64_t max_count,
                                                       fluxcpp_dtype_t dtype,
                                                       fluxcpp_all_reduce_t* op);
/* Collective, blocking. input and output are `count` contiguous elements (any count <= max_count,
 * the same on every rank; 0 is a no-op); output = the sum over ranks of input. input == output
 * reduces in place; any other overlap is FLUXCPP_ERROR_INVALID_ARGUMENT. The sum is taken in a
 * fixed order that depends only on W and the ranks' placement on hosts (docs/ops/all_reduce.md),
 * bf16 accumulated in f32 and rounded once, f64 in f64: bitwise identical on every rank and from
 * call to call, whichever algorithm the size selects. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_reduce_forward(fluxcpp_all_reduce_t op, const void* input,
                                                        int64_t count, void* output);
/* Zero-copy input: as fluxcpp_all_gather_input_buffer (room for max_count elements). */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_reduce_input_buffer(fluxcpp_all_reduce_t op,
                                                             void** buffer);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_reduce_destroy(fluxcpp_all_reduce_t op);

/* ---- gemm_rs (FLUX GemmRS: GEMM + reduce-scatter, row-parallel linear) ----------------------- */
typedef struct fluxcpp_gemm_rs_s* fluxcpp_gemm_rs_t;
/* Collective. (input, output) dtypes: (f32,f32), (f64,f64), (bf16,bf16), (bf16,f32). */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_rs_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n,
                                                    int64_t k, fluxcpp_dtype_t input_dtype,
                                                    fluxcpp_dtype_t output_dtype,
                                                    int transpose_weight, fluxcpp_gemm_rs_t* op);
/* Collective, blocking. input [m, k] (this rank's K slice); weight [n, k] ([k, n] when
 * transposed); bias [n] in the output dtype or NULL (same on every rank, added once);
 * output [m/W, n] = rows [r*m/W, (r+1)*m/W) of the sum over ranks of input · weightᵀ, + bias.
 * Partials stay in f32 (f64 for f64) until the final fixed-order sum, rounded once: results are
 * bitwise identical from call to call and run to run. m % W == 0. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_rs_forward(fluxcpp_gemm_rs_t op, const void* input,
                                                     int64_t m, const void* weight,
                                                     const void* bias, void* output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_rs_destroy(fluxcpp_gemm_rs_t op);

/* ---- ag_gemm (FLUX AGKernel: all-gather + GEMM, column-parallel linear) ------------------ */
typedef struct fluxcpp_ag_gemm_s* fluxcpp_ag_gemm_t;
/* Collective. (input, output) dtypes: (f32,f32), (f64,f64), (bf16,bf16), (bf16,f32). */
FLUXCPP_API fluxcpp_status_t fluxcpp_ag_gemm_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n,
                                                    int64_t k, fluxcpp_dtype_t input_dtype,
                                                    fluxcpp_dtype_t output_dtype,
                                                    int transpose_weight, fluxcpp_ag_gemm_t* op);
/* Collective, blocking. input [m/W, k]; weight [n, k] (this rank's column shard; [k, n] when
 * transposed); bias [n] in the output dtype or NULL; output [m, n] = AllGather(input) · weightᵀ +
 * bias; gathered_input [m, k] or NULL (receives AllGather(input)). m % W == 0. */
FLUXCPP_API fluxcpp_status_t fluxcpp_ag_gemm_forward(fluxcpp_ag_gemm_t op, const void* input,
                                                     int64_t m, const void* weight,
                                                     const void* bias, void* output,
                                                     void* gathered_input);
/* NULL is a no-op. */
/* Zero-copy input: as fluxcpp_all_gather_input_buffer. */
FLUXCPP_API fluxcpp_status_t fluxcpp_ag_gemm_input_buffer(fluxcpp_ag_gemm_t op, void** buffer);
FLUXCPP_API fluxcpp_status_t fluxcpp_ag_gemm_destroy(fluxcpp_ag_gemm_t op);

/* ---- packed weights (inference: a weight that stays the same call after call) ------------ */
typedef struct fluxcpp_packed_weight_s* fluxcpp_packed_weight_t;
/* Local (not collective). Packs weight ([n, k], or [k, n] when transpose_weight; f32 or bf16)
 * into the layout the GEMM engine computes on, for the ops of ctx (the column slabs its compute
 * threads compute are packed too). A snapshot: the ops compute with the weight as it was when
 * packed or last updated, and never read the caller's memory afterwards; after changing the
 * weight in place, call fluxcpp_packed_weight_update. */
FLUXCPP_API fluxcpp_status_t fluxcpp_packed_weight_create(fluxcpp_context_t ctx,
                                                          fluxcpp_dtype_t dtype, const void* weight,
                                                          int64_t n, int64_t k,
                                                          int transpose_weight,
                                                          fluxcpp_packed_weight_t* packed);
/* Repacks from weight (same dtype, shape and orientation). */
FLUXCPP_API fluxcpp_status_t fluxcpp_packed_weight_update(fluxcpp_packed_weight_t packed,
                                                          const void* weight);
/* NULL is a no-op. Neither update nor destroy while a forward uses it. */
FLUXCPP_API fluxcpp_status_t fluxcpp_packed_weight_destroy(fluxcpp_packed_weight_t packed);
/* As fluxcpp_ag_gemm_forward / fluxcpp_gemm_rs_forward with a packed weight, whose dtype, n, k
 * and orientation must match the op's (FLUXCPP_ERROR_INVALID_ARGUMENT on every rank otherwise,
 * and for a NULL weight with m > 0). */
FLUXCPP_API fluxcpp_status_t fluxcpp_ag_gemm_forward_packed(fluxcpp_ag_gemm_t op, const void* input,
                                                            int64_t m,
                                                            fluxcpp_packed_weight_t weight,
                                                            const void* bias, void* output,
                                                            void* gathered_input);
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_rs_forward_packed(fluxcpp_gemm_rs_t op, const void* input,
                                                            int64_t m,
                                                            fluxcpp_packed_weight_t weight,
                                                            const void* bias, void* output);

/* ---- gemm_ar (GEMM + all-reduce: row-parallel linear with replicated activations) ---------- */
typedef struct fluxcpp_gemm_ar_s* fluxcpp_gemm_ar_t;
/* Collective. (input, output) dtypes as gemm_rs. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_ar_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n,
                                                    int64_t k, fluxcpp_dtype_t input_dtype,
                                                    fluxcpp_dtype_t output_dtype,
                                                    int transpose_weight, fluxcpp_gemm_ar_t* op);
/* Collective, blocking. input [m, k] (this rank's K slice); weight [n, k] ([k, n] when
 * transposed); bias [n] in the output dtype or NULL (same on every rank, added once);
 * output [m, n] = Σ_s input_s · weight_sᵀ + bias on every rank. Any m <= max_m (no divisibility).
 * Partial products stay in f32 (f64 for f64) until the sum, taken in all_reduce's fixed order and
 * rounded once: bitwise identical on every rank and from call to call. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_ar_forward(fluxcpp_gemm_ar_t op, const void* input,
                                                     int64_t m, const void* weight,
                                                     const void* bias, void* output);
/* As fluxcpp_gemm_ar_forward with a packed weight (as fluxcpp_gemm_rs_forward_packed). */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_ar_forward_packed(fluxcpp_gemm_ar_t op, const void* input,
                                                            int64_t m,
                                                            fluxcpp_packed_weight_t weight,
                                                            const void* bias, void* output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_ar_destroy(fluxcpp_gemm_ar_t op);

/* ---- all_to_all_single (variable splits, like MPI_Alltoallv on rows) --------------------- */
typedef struct fluxcpp_all_to_all_single_s* fluxcpp_all_to_all_single_t;
/* Collective. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_to_all_single_create(fluxcpp_context_t ctx,
                                                              int64_t max_rows, int64_t n,
                                                              fluxcpp_dtype_t dtype,
                                                              fluxcpp_all_to_all_single_t* op);
/* Collective, blocking. input_splits, output_splits: W row counts each. input
 * [sum(input_splits), n]: the input_splits[t] rows starting at prefix(input_splits)[t] go to rank
 * t. output [sum(output_splits), n]: rows from rank s start at prefix(output_splits)[s]. Both sums
 * <= max_rows. Rank s's input_splits[r] must equal rank r's output_splits[s]. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_to_all_single_forward(fluxcpp_all_to_all_single_t op,
                                                               const void* input,
                                                               const int64_t* input_splits,
                                                               void* output,
                                                               const int64_t* output_splits);
/* NULL is a no-op. */
/* Zero-copy input: as fluxcpp_all_gather_input_buffer. */
FLUXCPP_API fluxcpp_status_t fluxcpp_all_to_all_single_input_buffer(fluxcpp_all_to_all_single_t op,
                                                                    void** buffer);
FLUXCPP_API fluxcpp_status_t fluxcpp_all_to_all_single_destroy(fluxcpp_all_to_all_single_t op);

/* ---- a2a_gemm (all-to-all with equal splits + GEMM) ---------------------------------------- */
typedef struct fluxcpp_a2a_gemm_s* fluxcpp_a2a_gemm_t;
/* Collective. (input, output) dtypes: (f32,f32), (f64,f64), (bf16,bf16), (bf16,f32). */
FLUXCPP_API fluxcpp_status_t fluxcpp_a2a_gemm_create(fluxcpp_context_t ctx, int64_t max_m,
                                                     int64_t n, int64_t k,
                                                     fluxcpp_dtype_t input_dtype,
                                                     fluxcpp_dtype_t output_dtype,
                                                     int transpose_weight, fluxcpp_a2a_gemm_t* op);
/* Collective, blocking. input [m, k]: row block t (m/W rows) goes to rank t. a2a_output [m, k]
 * or NULL: block s = what rank s sent here. output [m, n] = a2a_output · weightᵀ + bias.
 * m % W == 0. */
FLUXCPP_API fluxcpp_status_t fluxcpp_a2a_gemm_forward(fluxcpp_a2a_gemm_t op, const void* input,
                                                      int64_t m, const void* weight,
                                                      const void* bias, void* output,
                                                      void* a2a_output);
/* NULL is a no-op. */
/* Zero-copy input: as fluxcpp_all_gather_input_buffer. */
FLUXCPP_API fluxcpp_status_t fluxcpp_a2a_gemm_input_buffer(fluxcpp_a2a_gemm_t op, void** buffer);
FLUXCPP_API fluxcpp_status_t fluxcpp_a2a_gemm_destroy(fluxcpp_a2a_gemm_t op);

/* ---- gemm_a2a_transpose (FLUX GemmAllToAllTranspose: Ulysses, before attention) ------------ */
typedef struct fluxcpp_gemm_a2a_transpose_s* fluxcpp_gemm_a2a_transpose_t;
/* Collective. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_a2a_transpose_create(
    fluxcpp_context_t ctx, int64_t max_bs, int64_t max_seq, int64_t hidden, int64_t nheads,
    int64_t head_dim, fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
    fluxcpp_gemm_a2a_transpose_t* op);
/* Collective, blocking. seq (global) % W == 0, nheads % W == 0. input [bs, seq/W, hidden];
 * weight [nheads*head_dim, hidden]; bias [nheads*head_dim] or NULL. With y_s = input_s ·
 * weightᵀ + bias on rank s, output [bs, nheads/W, seq, head_dim] is output_r[b][h][t][d] =
 * y_{t / (seq/W)}[b][t % (seq/W)][(r*nheads/W + h)*head_dim + d]. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_a2a_transpose_forward(fluxcpp_gemm_a2a_transpose_t op,
                                                                const void* input, int64_t bs,
                                                                int64_t seq, const void* weight,
                                                                const void* bias, void* output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_gemm_a2a_transpose_destroy(fluxcpp_gemm_a2a_transpose_t op);

/* ---- a2a_transpose_gemm (FLUX AllToAllTransposeGemm: Ulysses, after attention) ------------- */
typedef struct fluxcpp_a2a_transpose_gemm_s* fluxcpp_a2a_transpose_gemm_t;
/* Collective. */
FLUXCPP_API fluxcpp_status_t fluxcpp_a2a_transpose_gemm_create(
    fluxcpp_context_t ctx, int64_t max_bs, int64_t max_seq, int64_t nheads, int64_t head_dim,
    int64_t n, fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
    fluxcpp_a2a_transpose_gemm_t* op);
/* Collective, blocking. input [bs, nheads/W, seq, head_dim]; weight [n, nheads*head_dim].
 * a2a_output [bs, seq/W, nheads*head_dim] or NULL, with
 * a2a_output_r[b][t][(s*nheads/W + h)*head_dim + d] = input_s[b][h][r*seq/W + t][d];
 * output [bs, seq/W, n] = a2a_output · weightᵀ + bias. */
FLUXCPP_API fluxcpp_status_t fluxcpp_a2a_transpose_gemm_forward(fluxcpp_a2a_transpose_gemm_t op,
                                                                const void* input, int64_t bs,
                                                                int64_t seq, const void* weight,
                                                                const void* bias, void* output,
                                                                void* a2a_output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_a2a_transpose_gemm_destroy(fluxcpp_a2a_transpose_gemm_t op);

/* ---- async_send_recv (FLUX AsyncSendRecv, DeepEP pp_send/pp_recv: pipeline parallel) ------ */
typedef struct fluxcpp_async_send_recv_s* fluxcpp_async_send_recv_t;
/* Collective, bounded by the timeout. A message is m rows (0 <= m <= max_m; m = 0 is a message)
 * of n elements of dtype. peers: the ranks this rank exchanges with (NULL with num_peers = 0: the
 * ring neighbours {r-1, r+1} mod W without r and duplicates); lists must be symmetric (checked).
 * max_m, n, dtype and num_slots (>= 1 messages in flight per ordered pair) must agree. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_create(fluxcpp_context_t ctx, int64_t max_m,
                                                            int64_t n, fluxcpp_dtype_t dtype,
                                                            int num_slots, int num_peers,
                                                            const int* peers,
                                                            fluxcpp_async_send_recv_t* op);
/* Point to point, not collective. Messages s -> d are numbered q = 1, 2, ... (64-bit counters,
 * never reset) and delivered in order; message q uses slot (q-1) % num_slots, filled only after d
 * released message q - num_slots. send: blocks until the slot is free, copies, publishes; data is
 * reusable on return (does not wait for d to receive). *seq (may be NULL) = q. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_send(fluxcpp_async_send_recv_t op, int dst,
                                                          const void* data, int64_t m,
                                                          uint64_t* seq);
/* isend: blocks only until the slot is free; the copy runs on a comm thread; data stays untouched
 * until send_wait(dst, seq) returns or send_test says done. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_isend(fluxcpp_async_send_recv_t op, int dst,
                                                           const void* data, int64_t m,
                                                           uint64_t* seq);
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_send_wait(fluxcpp_async_send_recv_t op,
                                                               int dst, uint64_t seq);
/* *done = 1 when message seq no longer reads the caller's data, else 0. Non-blocking. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_send_test(fluxcpp_async_send_recv_t op,
                                                               int dst, uint64_t seq, int* done);
/* *ready = 1 when the slot of the next message to dst is free (a send would not wait for dst to
 * release one), else 0. Non-blocking. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_send_ready(fluxcpp_async_send_recv_t op,
                                                                int dst, int* ready);
/* Blocks until the next message from src; if its m > out_rows: INVALID_ARGUMENT and the message
 * stays queued; else copies it into out [out_rows, n], sets *m (may be NULL), releases the slot. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_recv(fluxcpp_async_send_recv_t op, int src,
                                                          void* out, int64_t out_rows, int64_t* m);
/* Non-blocking: *m = rows of the next message from src, or -1 if none has arrived. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_probe(fluxcpp_async_send_recv_t op, int src,
                                                           int64_t* m);
/* Errors are point to point: only the caller fails, nothing is sent. A wait beyond the context
 * timeout is FLUXCPP_ERROR_TIMEOUT naming peer, message number and observed counter, and breaks
 * that ordered pair only (its later calls: INVALID_USAGE); other pairs go on.
 * Collective (bounded by the timeout; local once the context is closed or broken); messages
 * never received are discarded. NULL is a no-op; the handle is freed whatever it returns. */
FLUXCPP_API fluxcpp_status_t fluxcpp_async_send_recv_destroy(fluxcpp_async_send_recv_t op);

/* ---- inplace_cast (FLUX InplaceCast) ------------------------------------------------------ */
/* Local (not collective), blocking. Converts `count` elements of dtype `from` at `data` into
 * elements of dtype `to` over the same memory: element i of the result (at data + i*sizeof(to)) =
 * convert(element i of the input (at data + i*sizeof(from))). Pairs:
 *   f32 -> bf16, f64 -> f32  narrowing: round to nearest even (overflow gives +-Inf, denormals
 *                            exact); afterwards bytes [count*sizeof(to), count*sizeof(from)) are
 *                            unspecified.
 *   bf16 -> f32, f32 -> f64  widening, exact; the buffer must hold count*sizeof(to) bytes.
 * Every NaN comes out as a quiet NaN with its sign; +-Inf and +-0 stay. Independent of the
 * caller's rounding mode and FTZ/DAZ bits. Any alignment. count == 0 is a no-op.
 * ctx NULL: the calling thread does the work; otherwise the context's compute threads share it
 * with the calling thread (the context must not be in another call meanwhile).
 * FLUXCPP_ERROR_INVALID_ARGUMENT (buffer untouched, message naming the values): another pair,
 * count < 0 or too large for int64 byte counts, data NULL with count > 0.
 * FLUXCPP_ERROR_INVALID_USAGE: a closed context. */
FLUXCPP_API fluxcpp_status_t fluxcpp_inplace_cast(fluxcpp_context_t ctx, void* data, int64_t count,
                                                  fluxcpp_dtype_t from, fluxcpp_dtype_t to);

/* ---- reduce_blocks, convert: element-wise helpers of a framework's collectives -------------- */
typedef enum {
  FLUXCPP_REDUCE_SUM = 0,
  FLUXCPP_REDUCE_AVG = 1,
  FLUXCPP_REDUCE_PRODUCT = 2,
  FLUXCPP_REDUCE_MIN = 3,
  FLUXCPP_REDUCE_MAX = 4,
  FLUXCPP_REDUCE_BAND = 5,
  FLUXCPP_REDUCE_BOR = 6,
  FLUXCPP_REDUCE_BXOR = 7
} fluxcpp_reduce_op_t;
/* A plain function: no context, no communication, thread-safe. out[i] = blocks[0][i] (op)
 * blocks[1][i] (op) ... (op) blocks[nblocks-1][i] for i < count, always in block order: equal
 * blocks give bitwise-equal results on every rank and machine (the rank-order reduction the
 * library's own sums use: pass the ranks' blocks in rank order). Floating types accumulate in
 * f32 (f64 for f64) and are rounded once to the dtype (bf16 and f16: round to nearest even; a
 * bf16 NaN keeps its sign and gets the quiet bit); AVG divides the sum by `divisor` before
 * rounding (divisor is read by AVG only); MIN and MAX let a NaN win. Integer SUM and PRODUCT
 * wrap; on FLUXCPP_BOOL (any nonzero byte is true, the result is 0 or 1) SUM and MAX are "or",
 * PRODUCT and MIN "and", BXOR "not equal". BAND, BOR, BXOR: integers and bool; AVG: floating
 * types; the rest: every dtype. out may be blocks[0] (not a partial overlap). count == 0 is a
 * no-op. FLUXCPP_ERROR_INVALID_ARGUMENT (out untouched, the message naming the values): an op
 * not defined on the dtype, nblocks < 1, count < 0, AVG with divisor < 1, a NULL pointer with
 * count > 0. */
FLUXCPP_API fluxcpp_status_t fluxcpp_reduce_blocks(fluxcpp_dtype_t dtype, fluxcpp_reduce_op_t op,
                                                   const void* const* blocks, int nblocks,
                                                   int64_t count, int divisor, void* out);
/* A plain function: no context, thread-safe. dst[i] = src[i] converted, for the pairs
 * bf16 -> f32 and f16 -> f32 (exact) and f32 -> bf16, f32 -> f16 (round to nearest even,
 * overflow to +-Inf, a NaN stays a NaN), the conversions fluxcpp_reduce_blocks uses. src and
 * dst do not overlap. count == 0 is a no-op. FLUXCPP_ERROR_INVALID_ARGUMENT: another pair,
 * count < 0, a NULL pointer with count > 0. */
FLUXCPP_API fluxcpp_status_t fluxcpp_convert(const void* src, fluxcpp_dtype_t from, void* dst,
                                             fluxcpp_dtype_t to, int64_t count);

/* ---- moe_layout (FLUX calc_scatter_index_stable, DeepEP get_dispatch_layout) --------------- */
/* A plain function: no context, no communication, thread-safe; equal inputs give bitwise-equal
 * outputs. topk_ids [T, K] int32 (T = num_tokens, K = topk), each id in [0, E) or -1 (an
 * unrouted slot); E = num_experts, E % num_ranks == 0, L = E/num_ranks; T*K <= INT32_MAX.
 * The expert-major layout sorts the routed slots by (expert, t, k): slot (t, k) with id e sits
 * at row P[e] + #{slots (t', k') with id e, t'*K + k' < t*K + k}, P[e] = sum of counts[e' < e],
 * M = P[E]. Outputs (all but expert_counts may be NULL): expert_counts [E]; rank_rows
 * [num_ranks] = sum of counts[q*L + l]; rank_tokens [num_ranks] = tokens with at least one slot
 * owned by q; scatter_index [T, K] = each slot's row, or -1; gather_index [T*K] with
 * gather_index[scatter_index[t][k]] = t; topk_index [T*K] with topk_index[scatter_index[t][k]] =
 * k; entries j >= M of the last two are -1. On an invalid argument nothing is written. */
FLUXCPP_API fluxcpp_status_t fluxcpp_moe_layout(const int32_t* topk_ids, int64_t num_tokens,
                                                int64_t topk, int64_t num_experts,
                                                int64_t num_ranks, int64_t* expert_counts,
                                                int64_t* rank_rows, int64_t* rank_tokens,
                                                int32_t* scatter_index, int32_t* gather_index,
                                                int32_t* topk_index);

/* ---- grouped_gemm (FLUX GemmGroupedV3; local, not collective) ------------------------------ */
typedef struct fluxcpp_grouped_gemm_s* fluxcpp_grouped_gemm_t;
/* Local: only the calling rank is involved (ctx supplies the compute threads; errors are local).
 * num_groups G >= 1. (input, output) dtypes: (f32,f32), (f64,f64), (bf16,bf16), (bf16,f32). */
FLUXCPP_API fluxcpp_status_t fluxcpp_grouped_gemm_create(fluxcpp_context_t ctx, int64_t num_groups,
                                                         int64_t max_m, int64_t n, int64_t k,
                                                         fluxcpp_dtype_t input_dtype,
                                                         fluxcpp_dtype_t output_dtype,
                                                         int transpose_weight,
                                                         fluxcpp_grouped_gemm_t* op);
/* Local, blocking. splits [G] >= 0, m = sum of splits <= max_m, P[g] = sum of splits[g' < g];
 * input [m, k]; weight [G, n, k] (group g at g*n*k; [G, k, n] when transposed); scale [G] f32 or
 * NULL. output [m, n]: for P[g] <= i < P[g+1], output[i][j] = round(s_g * sum_c
 * input[i][c]*W_g[j][c]), accumulated in f32 (f64 for f64) and rounded once to the output dtype.
 * Empty groups allowed (their weights are not read); m == 0 is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_grouped_gemm_forward(fluxcpp_grouped_gemm_t op,
                                                          const void* input, const int64_t* splits,
                                                          const void* weight, const float* scale,
                                                          void* output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_grouped_gemm_destroy(fluxcpp_grouped_gemm_t op);

/* ---- moe_dispatch (FLUX DisScatterForward, DeepEP dispatch) -------------------------------- */
typedef struct fluxcpp_moe_dispatch_s* fluxcpp_moe_dispatch_t;
/* Collective. Expert parallel over the whole context: E = num_experts, E % W == 0, rank r owns
 * experts [r*L, (r+1)*L), L = E/W. max_recv_rows: the most rows any rank may receive in one call
 * (0: W*max_tokens*topk), the same on every rank; max_tokens*topk <= INT32_MAX. */
FLUXCPP_API fluxcpp_status_t fluxcpp_moe_dispatch_create(fluxcpp_context_t ctx, int64_t max_tokens,
                                                         int64_t hidden, int64_t topk,
                                                         int64_t num_experts, int64_t max_recv_rows,
                                                         fluxcpp_dtype_t dtype,
                                                         fluxcpp_moe_dispatch_t* op);
/* Collective, blocking. Each rank s passes its own T_s = num_tokens (0 <= T_s <= max_tokens, may
 * differ per rank), input_s [T_s, hidden], topk_ids_s [T_s, K] (ids in [0, E) or -1),
 * topk_weights_s [T_s, K] f32 or NULL. With c_s[e] the slots of rank s with id e, rank r receives
 * R_r = sum_s sum_l c_s[r*L + l] rows: recv_expert_counts [L] (required) = sum_s c_s[r*L + l];
 * *num_recv_rows (required) = R_r; recv [max_recv_rows, hidden]: recv[rho_r(s,t,k)] =
 * input_s[t], rows sorted by (local expert, source rank, token, k) (rho_r in docs/api.md); rows
 * >= R_r untouched. recv_weights [max_recv_rows] f32 or NULL (if any rank passes it, every rank
 * with routed slots passes topk_weights); recv_src [max_recv_rows, 3] int32 or NULL: (s, t, k).
 * Overflow (any R_q > max_recv_rows): FLUXCPP_ERROR_INVALID_ARGUMENT on every rank naming q, R_q,
 * the capacity and the largest R over the ranks; *num_recv_rows and recv_expert_counts are still
 * written, recv is untouched. A pure copy: bitwise reproducible. */
FLUXCPP_API fluxcpp_status_t fluxcpp_moe_dispatch_forward(
    fluxcpp_moe_dispatch_t op, const void* input, int64_t num_tokens, const int32_t* topk_ids,
    const float* topk_weights, void* recv, float* recv_weights, int32_t* recv_src,
    int64_t* recv_expert_counts, int64_t* num_recv_rows);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_moe_dispatch_destroy(fluxcpp_moe_dispatch_t op);

/* ---- moe_combine (FLUX DisScatterBackward, DeepEP combine) ---------------------------------- */
typedef struct fluxcpp_moe_combine_s* fluxcpp_moe_combine_t;
/* Collective. Arguments as moe_dispatch's; (input, output) dtypes (f32,f32), (f64,f64),
 * (bf16,bf16), (bf16,f32). */
FLUXCPP_API fluxcpp_status_t fluxcpp_moe_combine_create(fluxcpp_context_t ctx, int64_t max_tokens,
                                                        int64_t hidden, int64_t topk,
                                                        int64_t num_experts, int64_t max_recv_rows,
                                                        fluxcpp_dtype_t input_dtype,
                                                        fluxcpp_dtype_t output_dtype,
                                                        fluxcpp_moe_combine_t* op);
/* Collective, blocking. The inverse of moe_dispatch for the same routing: each rank passes the
 * num_tokens and topk_ids it dispatched with. input [num_rows, hidden]: one row per received slot
 * in moe_dispatch's order (num_rows != R_r on any rank is FLUXCPP_ERROR_INVALID_ARGUMENT on every
 * rank). topk_weights [num_tokens, K] f32 or NULL. output [num_tokens, hidden] on rank r, for each
 * t: acc = +0 (f32; f64 for f64); for k = 0..K-1 with e = topk_ids[t][k] >= 0, owner q = e/L:
 * acc <- acc + topk_weights[t][k] * input_q[rho_q(r,t,k)] (the product rounded to the accumulator
 * type, then added, no fused multiply-add; without weights no multiply); output[t] = acc rounded
 * once; unrouted tokens get +0. Bitwise identical from call to call and run to run. */
FLUXCPP_API fluxcpp_status_t fluxcpp_moe_combine_forward(fluxcpp_moe_combine_t op,
                                                         const void* input, int64_t num_rows,
                                                         int64_t num_tokens,
                                                         const int32_t* topk_ids,
                                                         const float* topk_weights, void* output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t fluxcpp_moe_combine_destroy(fluxcpp_moe_combine_t op);
/* ---- ag_scatter_grouped_gemm (FLUX GemmGroupedV3AGScatter: MoE layer 0 under TP) ---------- */
typedef struct fluxcpp_ag_scatter_grouped_gemm_s* fluxcpp_ag_scatter_grouped_gemm_t;
/* Collective. Rank layout (FLUX): tp = W/ep_size; rank r is EP rank q = r/tp, TP rank r % tp; it
 * owns experts [q*L, (q+1)*L), L = num_experts/ep_size, a column shard of width ffn_shard of
 * each. W % ep_size == 0, num_experts % ep_size == 0. Dtype pairs as the GEMM ops. */
FLUXCPP_API fluxcpp_status_t fluxcpp_ag_scatter_grouped_gemm_create(
    fluxcpp_context_t ctx, int64_t max_tokens, int64_t hidden, int64_t ffn_shard, int64_t topk,
    int64_t num_experts, int64_t ep_size, fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
    int transpose_weight, fluxcpp_ag_scatter_grouped_gemm_t* op);
/* Collective, blocking. T = num_tokens (global), T % W == 0, T <= max_tokens; T == 0 is a no-op.
 * input [T/W, hidden]; X = AllGather(input) [T, hidden]. splits [E] and scatter_index [T, K]
 * identical on every rank (checked: a disagreement is INVALID_ARGUMENT on every rank);
 * M = sum of splits <= T*K; scatter_index values in [-1, M) cover every j in [0, M) exactly once.
 * weight [L, ffn_shard, hidden] ([L, hidden, ffn_shard] when transposed); scale [L] f32 or NULL.
 * With P the prefix sums of splits, b = P[q*L], M_r = P[(q+1)*L] - b: output [M_r, ffn_shard],
 * output[j - b][c] = round(s_l * sum_h X[t][h]*W_l[c][h]) for each slot with j =
 * scatter_index[t][k] in [b, b + M_r), l = e - q*L for the expert e of row j. gathered_input
 * [T, hidden] or NULL gets X. */
FLUXCPP_API fluxcpp_status_t fluxcpp_ag_scatter_grouped_gemm_forward(
    fluxcpp_ag_scatter_grouped_gemm_t op, const void* input, int64_t num_tokens,
    const int64_t* splits, const int32_t* scatter_index, const void* weight, const float* scale,
    void* output, void* gathered_input);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t
fluxcpp_ag_scatter_grouped_gemm_destroy(fluxcpp_ag_scatter_grouped_gemm_t op);

/* ---- grouped_gemm_gather_rs (FLUX GemmGroupedV3GatherRS: MoE layer 1 under TP) ------------ */
typedef struct fluxcpp_grouped_gemm_gather_rs_s* fluxcpp_grouped_gemm_gather_rs_t;
/* Collective; arguments as fluxcpp_ag_scatter_grouped_gemm_create. */
FLUXCPP_API fluxcpp_status_t fluxcpp_grouped_gemm_gather_rs_create(
    fluxcpp_context_t ctx, int64_t max_tokens, int64_t hidden, int64_t ffn_shard, int64_t topk,
    int64_t num_experts, int64_t ep_size, fluxcpp_dtype_t input_dtype, fluxcpp_dtype_t output_dtype,
    int transpose_weight, fluxcpp_grouped_gemm_gather_rs_t* op);
/* Collective, blocking. T, splits, scatter_index, b and M_r as in ag_scatter_grouped_gemm.
 * input [M_r, ffn_shard]; weight [L, hidden, ffn_shard] ([L, ffn_shard, hidden] when
 * transposed); routing_weights [T, K] f32 or NULL, identical on every rank (checked). Y_s(j) =
 * rank s's GEMM row for global row j in the accumulator type, never rounded. output [T/W, hidden]
 * on rank r, for t = r*T/W + t': acc = +0; for s = 0..W-1: part = +0; for k = 0..K-1, j =
 * scatter_index[t][k]: if b_s <= j < b_s + M_s, part <- part + routing_weights[t][k]*Y_s(j)
 * (product rounded, then added); then acc <- acc + part. output[t'] = acc rounded once: bitwise
 * reproducible from call to call and run to run. */
FLUXCPP_API fluxcpp_status_t fluxcpp_grouped_gemm_gather_rs_forward(
    fluxcpp_grouped_gemm_gather_rs_t op, const void* input, int64_t num_tokens,
    const int64_t* splits, const int32_t* scatter_index, const void* weight,
    const float* routing_weights, void* output);
/* NULL is a no-op. */
FLUXCPP_API fluxcpp_status_t
fluxcpp_grouped_gemm_gather_rs_destroy(fluxcpp_grouped_gemm_gather_rs_t op);

#ifdef __cplusplus
}
#endif

#ifndef FLUXCPP_NO_MPI
#include "fluxcpp/fluxcpp_mpi.h"
#endif

#endif /* FLUXCPP_FLUXCPP_H_ */
