// fluxcpp_bench: one harness, one entry per op.
//
// Timing: a sample is a batch of iterations started together after a barrier, divided by the
// batch size (so microsecond ops are not drowned by barrier skew); each rank keeps its samples,
// the harness takes the max over ranks per sample, then the median/min/max over samples.
#pragma once

#include <fmt/format.h>
#include <mpi.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fluxcpp/context.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp::bench {

// FLUXCPP_BENCH_CHANNEL=gloo: the context comes from a store and its hosts meet over the TCP
// channel (bench_store.cpp); otherwise from MPI_COMM_WORLD.
bool store_channel();
Context store_context(int rank, int size);

struct Stats {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// A GEMM problem: what M, N and K mean is the entry's (see --help).
struct GemmShape {
  int64_t m, n, k;
};

struct Settings {
  int warmup = 3;
  int samples = 15;
  double min_batch_ms = 2.0;  // iterations per sample grow until a batch takes this long
  bool quick = false;         // fewer shapes and samples
  bool full = false;          // also the heaviest shapes
  bool link = false;          // the shapes meant for hosts joined by a shaped link (bench_link.sh)
  // --shape M,N,K (repeatable): gemm, ag_gemm, gemm_rs, gemm_ar and a2a_gemm run these instead
  // of their own lists. --dtype: the input dtypes of those entries.
  std::vector<GemmShape> shapes;
  std::vector<DType> dtypes = {DType::kFloat32, DType::kBFloat16};
};

class Env {
 public:
  Env(Context& ctx, Settings s, FILE* json) : ctx_(ctx), settings_(s), json_(json) {}
  Context& ctx() { return ctx_; }
  const Settings& settings() const { return settings_; }
  // The same context and JSON file with other settings (e.g. fewer samples for one entry).
  Env with_settings(const Settings& s) const { return Env(ctx_, s, json_); }
  int rank() const { return ctx_.rank(); }
  int world() const { return ctx_.world_size(); }

  // Times fn (a collective) as described above; identical on every rank.
  Stats time(const std::function<void()>& fn) { return time_all({fn})[0]; }
  // Times several variants with their samples interleaved (A B C, B C A, C A B, ...: the order
  // rotates), so that drift in a shared, noisy machine hits every variant alike and each runs in
  // every position alike; their ratios stay meaningful.
  std::vector<Stats> time_all(const std::vector<std::function<void()>>& fns);

  // Table output (rank 0 only): a titled section, its header, then rows.
  void section(const std::string& title, const std::vector<std::string>& columns);
  void row(const std::vector<std::string>& cells);
  // JSON line (rank 0 only, when --json was given). Values are already JSON literals.
  void json(const std::vector<std::pair<std::string, std::string>>& fields);

 private:
  Context& ctx_;
  Settings settings_;
  FILE* json_;
  std::vector<std::size_t> widths_;
};

std::string fmt_ms(double ms);    // adaptive: "3.12us", "1.234ms"
std::string fmt_bytes(double b);  // "4KiB", "64MiB"
std::string jstr(const std::string& s);
std::string jnum(double v);

// `count` values in [-1, 1) of dtype t, deterministic in seed.
std::vector<unsigned char> random_values(DType t, std::size_t count, uint64_t seed);
// Element i of a buffer of dtype t.
double value_at(DType t, const unsigned char* p, std::size_t i);

// A collective against its MPI counterpart at one size (block `bytes` per rank, rows of `row`
// elements named `row_name` in the JSON): header, then one row and JSON line per size.
// bytes_is_total: `bytes` is the rank's whole input (all-to-all, all-reduce), not one of W blocks.
// dtype: the op's element type, as the JSON line names it.
void collective_header(Env& env, const std::string& title);
void collective_row(Env& env, const char* op, const char* row_name, int64_t m, int64_t row,
                    std::size_t bytes, const Stats& ours, const Stats& mpi, long wrong,
                    bool bytes_is_total = false, DType dtype = DType::kFloat32);

// Whether `op` can run with m total rows on the world (m divisible by it); prints a note on rank 0
// when it cannot.
bool rows_fit(Env& env, const char* op, int64_t m);

// One row of a fused op's table.
// Total rows up to which a GEMM op takes its decode path (one GEMM call; ops::kMinTileRows): the
// fused tables add a row with a packed weight there.
inline constexpr int64_t kDecodeRows = 128;

struct FusedCase {
  const char* op;
  int64_t m, n, k;
  DType in, out;
  bool zero_copy = false;  // the op read its input from its zero-copy input buffer
  bool packed = false;     // the fused column ran on a PackedWeight (the others on the weight,
                           // but in gemm_ar, whose unfused and GEMM columns use it too)
};
// A fused GEMM op against its parts. `t` holds, in this order: fused, unfused (the MPI collective
// plus the GEMM and any layout copies), gemm-only and comm-only (the op's own paths; NaN, shown
// as "–" and null in the JSON, for an op without them), GEMM (one BLAS call over the rank's
// whole GEMM) and `move` (MPI moving the bytes the op moves, e.g. MPI_Allgather, MPI_Alltoall;
// gemm_ar: MPI_Allreduce). Derived, as the link probe defines them: speedup = unfused /
// fused; hidden = (GEMM + move - fused) / min(GEMM, move), "–" when move < 5 % of GEMM;
// limit = fused / max(GEMM, move). `move` names that column.
void fused_header(Env& env, const std::string& title, const char* move);
void fused_row(Env& env, const FusedCase& c, const std::vector<Stats>& t, long wrong);

// MPI moving exactly the bytes an exchange moves between ranks (no copy of a rank's own block):
// `send_block` bytes from each rank to every other rank, at send + t * send_stride (stride 0: the
// same block to everyone, as an all-gather), received at recv + s * block. The `move` reference
// of the fused tables; with two ranks it is an MPI_Sendrecv of one block.
void mpi_move(Env& env, const void* send, std::size_t send_stride, void* recv, std::size_t block);

using Entry = std::function<void(Env&)>;
// Every entry, in the order they run: name -> function.
const std::vector<std::pair<std::string, Entry>>& entries();

void bench_all_gather(Env& env);
void bench_gemm(Env& env);
void bench_ag_gemm(Env& env);
void bench_reduce_scatter(Env& env);
void bench_gemm_rs(Env& env);
void bench_all_reduce(Env& env);
void bench_gemm_ar(Env& env);
void bench_all_to_all_single(Env& env);
void bench_a2a_gemm(Env& env);
void bench_ulysses(Env& env);
void bench_link_probe(Env& env);
void bench_inplace_cast(Env& env);
void bench_moe_layout(Env& env);
void bench_grouped_gemm(Env& env);
void bench_send_recv(Env& env);
void bench_moe(Env& env);
void bench_moe_overlap(Env& env);
void bench_ag_scatter_grouped_gemm(Env& env);
void bench_grouped_gemm_gather_rs(Env& env);

}  // namespace fluxcpp::bench
