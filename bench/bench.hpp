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

struct Stats {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

struct Settings {
  int warmup = 3;
  int samples = 15;
  double min_batch_ms = 2.0;  // iterations per sample grow until a batch takes this long
  bool quick = false;         // fewer shapes and samples
  bool full = false;          // also the heaviest shapes
};

class Env {
 public:
  Env(Context& ctx, Settings s, FILE* json) : ctx_(ctx), settings_(s), json_(json) {}
  Context& ctx() { return ctx_; }
  const Settings& settings() const { return settings_; }
  int rank() const { return ctx_.rank(); }
  int world() const { return ctx_.world_size(); }

  // Times fn (a collective) as described above; identical on every rank.
  Stats time(const std::function<void()>& fn) { return time_all({fn})[0]; }
  // Times several variants with their samples interleaved (A B C A B C ...), so that drift in a
  // shared, noisy machine hits every variant alike and their ratios stay meaningful.
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
// bytes_is_total: `bytes` is the rank's whole input (all-to-all), not one of W blocks.
void collective_header(Env& env, const std::string& title);
void collective_row(Env& env, const char* op, const char* row_name, int64_t m, int64_t row,
                    std::size_t bytes, const Stats& ours, const Stats& mpi, long wrong,
                    bool bytes_is_total = false);

// A fused GEMM op: times of {fused, unfused, gemm-only, comm-only, the MPI collective alone},
// with the derived speedup, overlap efficiency and limit ratio. `mpi` names the collective
// ("AG", "RS", "A2A") in the table and JSON.
void fused_header(Env& env, const std::string& title, const char* mpi);
void fused_row(Env& env, const char* op, const char* mpi, int64_t m, int64_t n, int64_t k, DType in,
               DType out, const std::vector<Stats>& t, long wrong);

using Entry = std::function<void(Env&)>;
// Every entry, in the order they run: name -> function.
const std::vector<std::pair<std::string, Entry>>& entries();

void bench_all_gather(Env& env);
void bench_gemm(Env& env);
void bench_ag_gemm(Env& env);
void bench_reduce_scatter(Env& env);
void bench_gemm_rs(Env& env);
void bench_all_to_all_single(Env& env);
void bench_a2a_gemm(Env& env);
void bench_ulysses(Env& env);
void bench_inplace_cast(Env& env);
void bench_moe_layout(Env& env);
void bench_grouped_gemm(Env& env);

}  // namespace fluxcpp::bench
