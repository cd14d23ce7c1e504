#include <unistd.h>

#include <thread>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "bench.hpp"
#include "comm/affinity.hpp"
#include "comm/config.hpp"
#include "comm/context_impl.hpp"
#include "fluxcpp/fluxcpp.hpp"
#include "kernels/blas_threads.hpp"
#include "kernels/cast.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::bench {

const std::vector<std::pair<std::string, Entry>>& entries() {
  static const std::vector<std::pair<std::string, Entry>> e = {
      {"gemm", bench_gemm},
      {"all_gather", bench_all_gather},
      {"ag_gemm", bench_ag_gemm},
      {"reduce_scatter", bench_reduce_scatter},
      {"gemm_rs", bench_gemm_rs},
      {"all_reduce", bench_all_reduce},
      {"gemm_ar", bench_gemm_ar},
      {"all_to_all_single", bench_all_to_all_single},
      {"a2a_gemm", bench_a2a_gemm},
      {"ulysses", bench_ulysses},
      {"inplace_cast", bench_inplace_cast},
      {"moe_layout", bench_moe_layout},
      {"grouped_gemm", bench_grouped_gemm},
      {"send_recv", bench_send_recv},
      {"moe", bench_moe},
      {"moe_overlap", bench_moe_overlap},
      {"ag_scatter_grouped_gemm", bench_ag_scatter_grouped_gemm},
      {"grouped_gemm_gather_rs", bench_grouped_gemm_gather_rs},
      {"link_probe", bench_link_probe},
  };
  return e;
}

std::vector<Stats> Env::time_all(const std::vector<std::function<void()>>& fns) {
  using clock = std::chrono::steady_clock;
  auto run_batch = [](const std::function<void()>& fn, int batch) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = clock::now();
    for (int i = 0; i < batch; ++i) fn();
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  };
  // Per variant: warm up, then grow the batch until it takes min_batch_ms on the slowest rank.
  std::vector<int> batch(fns.size(), 1);
  for (std::size_t v = 0; v < fns.size(); ++v) {
    for (int i = 0; i < settings_.warmup; ++i) fns[v]();
    for (;;) {
      double ms = run_batch(fns[v], batch[v]);
      MPI_Allreduce(MPI_IN_PLACE, &ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (ms >= settings_.min_batch_ms || batch[v] >= (1 << 16)) break;
      double grow = std::ceil(batch[v] * settings_.min_batch_ms / std::max(ms, 1e-3));
      batch[v] =
          static_cast<int>(std::min<double>(1 << 16, std::max<double>(2.0 * batch[v], grow)));
    }
  }
  const int n = settings_.quick ? std::max(5, settings_.samples / 3) : settings_.samples;
  std::vector<std::vector<double>> t(fns.size(), std::vector<double>(n));
  // The order rotates by one each sample (A B C, B C A, C A B, ...), so every variant runs in
  // every position alike: first after the barrier as often as the others. A variant's time
  // depends on what ran just before it (measured: the fused decode rows moved by 10 % when the
  // order was reversed); rotation does not balance the predecessor itself beyond two variants
  // (inside a sample B still follows A).
  for (int s = 0; s < n; ++s)
    for (std::size_t i = 0; i < fns.size(); ++i) {
      const std::size_t v = (i + static_cast<std::size_t>(s)) % fns.size();
      t[v][s] = run_batch(fns[v], batch[v]) / batch[v];
    }
  std::vector<Stats> out;
  for (auto& tv : t) {
    MPI_Allreduce(MPI_IN_PLACE, tv.data(), n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    std::sort(tv.begin(), tv.end());
    out.push_back({tv[n / 2], tv.front(), tv.back()});
  }
  return out;
}

void Env::section(const std::string& title, const std::vector<std::string>& columns) {
  if (rank() != 0) return;
  widths_.clear();
  for (const auto& c : columns) widths_.push_back(std::max<std::size_t>(c.size(), 9));
  std::printf("\n## %s\n", title.c_str());
  row(columns);
}

void Env::row(const std::vector<std::string>& cells) {
  if (rank() != 0) return;
  for (std::size_t i = 0; i < cells.size(); ++i)
    std::printf("%*s ", static_cast<int>(i < widths_.size() ? widths_[i] : 9), cells[i].c_str());
  std::printf("\n");
  std::fflush(stdout);
}

void Env::json(const std::vector<std::pair<std::string, std::string>>& fields) {
  if (rank() != 0 || json_ == nullptr) return;
  std::string line = "{";
  for (std::size_t i = 0; i < fields.size(); ++i)
    line += (i ? ", " : "") + jstr(fields[i].first) + ": " + fields[i].second;
  std::fprintf(json_, "%s}\n", line.c_str());
  std::fflush(json_);
}

}  // namespace fluxcpp::bench

namespace {

void usage() {
  std::printf(
      "usage: mpirun -np N fluxcpp_bench [--op NAME[,NAME...]] [--json FILE] [--quick] [--full]\n"
      "                                   [--link] [--shape M,N,K ...] [--dtype f32|bf16]\n"
      "                                   [--samples N] [--warmup N] [--batch-ms MS] [--list]\n"
      "                                   [--help-env]\n"
      "  --op      entries to run (default: all; bare NAMEs work too; with --shape: gemm,\n"
      "            ag_gemm, gemm_rs, gemm_ar, a2a_gemm):");
  for (const auto& e : fluxcpp::bench::entries()) std::printf(" %s", e.first.c_str());
  std::printf(
      "\n  --json    also write one JSON line per row to FILE\n"
      "  --quick   fewer shapes and samples\n"
      "  --full    also the heaviest shapes (minutes on a small machine)\n"
      "  --link    the fused ops' shapes for hosts joined by a shaped link, where the link time\n"
      "            is at least 30 %% of the GEMM's (scripts/bench_link.sh passes it)\n"
      "  --shape M,N,K  (repeatable) run exactly these shapes, instead of the built-in lists, in\n"
      "            the entries that take one (M must be divisible by the number of ranks for\n"
      "            the fused ops; other shapes are skipped with a note):\n"
      "              gemm      C[M,N] = A[M,K] * W[N,K]^T on every rank\n"
      "              ag_gemm   M total rows over all ranks (M/ranks each), N columns per rank\n"
      "                        (the rank's weight is [N,K]), K\n"
      "              gemm_rs   M total rows (every rank holds all M rows of its K slice), N\n"
      "                        columns, K the per-rank depth; each rank gets M/ranks rows\n"
      "              gemm_ar   M rows (the same on every rank, any M), N columns, K the\n"
      "                        per-rank depth; every rank gets all M rows\n"
      "              a2a_gemm  M rows per rank (M/ranks to each peer), N columns, K row length\n"
      "  --dtype f32|bf16  input dtype of those entries and of all_reduce (default: both)\n"
      "  --batch-ms MS  a sample is a batch of back-to-back calls sized (once, at warm-up) to\n"
      "            take at least MS ms (default 2)\n"
      "  --help-env  list the FLUXCPP_* settings\n"
      "Context settings come from FLUXCPP_* variables; FLUXCPP_BENCH_CHANNEL=gloo makes the\n"
      "context from a store, its hosts meeting over gloo's TCP transport (MPI still starts the\n"
      "ranks and runs the unfused references); FLUXCPP_BENCH_RANKS_PER_NODE forces\n"
      "simulated hosts.\n");
}

// "M,N,K" -> shape; false when malformed or not positive.
bool parse_shape(const std::string& v, fluxcpp::bench::GemmShape& s) {
  long long m = 0, n = 0, k = 0;
  char tail = 0;
  if (std::sscanf(v.c_str(), "%lld,%lld,%lld%c", &m, &n, &k, &tail) != 3) return false;
  if (m <= 0 || n <= 0 || k <= 0) return false;
  s = {m, n, k};
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fluxcpp;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bench::Settings settings;
  std::string ops = "all", json_path, bare;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        if (rank == 0) std::fprintf(stderr, "fluxcpp_bench: %s needs a value\n", a.c_str());
        MPI_Finalize();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--op")
      ops = next();
    else if (a == "--json")
      json_path = next();
    else if (a == "--quick")
      settings.quick = true;
    else if (a == "--full")
      settings.full = true;
    else if (a == "--link")
      settings.link = true;
    else if (a == "--shape" || a == "--dtype") {
      const std::string v = next();
      bench::GemmShape shape{};
      bool ok = true;
      if (a == "--shape" && (ok = parse_shape(v, shape)))
        settings.shapes.push_back(shape);
      else if (a == "--dtype" && (ok = v == "f32" || v == "bf16"))
        settings.dtypes = {v == "f32" ? DType::kFloat32 : DType::kBFloat16};
      if (!ok) {
        if (rank == 0)
          std::fprintf(stderr, "fluxcpp_bench: bad %s '%s' (want %s)\n", a.c_str(), v.c_str(),
                       a == "--shape" ? "M,N,K, all positive" : "f32 or bf16");
        MPI_Finalize();
        return 2;
      }
    } else if (a == "--samples")
      settings.samples = std::max(1, std::atoi(next().c_str()));
    else if (a == "--batch-ms")
      settings.min_batch_ms = std::max(0.1, std::atof(next().c_str()));
    else if (a == "--warmup")
      settings.warmup = std::max(0, std::atoi(next().c_str()));
    else if (a == "--list" || a == "--help" || a == "-h" || a == "--help-env") {
      if (rank == 0) {
        if (a == "--help-env") {
          for (const auto& v : env_vars())
            std::printf("%-26s default %-6s %s\n", v.name, v.default_value, v.help);
        } else if (a == "--list") {
          for (const auto& e : bench::entries()) std::printf("%s\n", e.first.c_str());
        } else {
          usage();
        }
      }
      MPI_Finalize();
      return 0;
    } else if (!a.empty() && a[0] != '-') {
      bare += (bare.empty() ? "" : ",") + a;  // an entry name without --op
    } else {
      if (rank == 0) {
        std::fprintf(stderr, "fluxcpp_bench: unknown argument '%s'\n", a.c_str());
        usage();
      }
      MPI_Finalize();
      return 2;
    }
  }
  if (!bare.empty()) ops = ops == "all" ? bare : ops + "," + bare;
  // --shape without a choice of entries: the entries that take it.
  if (ops == "all" && !settings.shapes.empty()) ops = "gemm,ag_gemm,gemm_rs,gemm_ar,a2a_gemm";
  std::vector<std::string> wanted;
  for (std::size_t p = 0; p <= ops.size();) {
    std::size_t q = ops.find(',', p);
    if (q == std::string::npos) q = ops.size();
    if (q > p) wanted.push_back(ops.substr(p, q - p));
    p = q + 1;
  }
  for (const auto& w : wanted) {
    bool known = w == "all";
    for (const auto& e : bench::entries()) known = known || e.first == w;
    if (!known) {
      if (rank == 0)
        std::fprintf(stderr, "fluxcpp_bench: unknown op '%s' (see --list)\n", w.c_str());
      MPI_Finalize();
      return 2;
    }
  }

  int rc = 0;
  try {
    ContextOptions o;
    if (const char* r = std::getenv("FLUXCPP_BENCH_RANKS_PER_NODE"))
      o.ranks_per_host = std::atoi(r);
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    Context ctx = bench::store_channel() ? bench::store_context(rank, world)
                                         : Context(MPI_COMM_WORLD, o);
    const auto& impl = *ctx.impl();
    FILE* json = nullptr;
    if (rank == 0 && !json_path.empty()) {
      json = std::fopen(json_path.c_str(), "w");
      if (json == nullptr) throw Error(Errc::kSystem, "cannot open " + json_path);
    }
    if (rank == 0) {
      char host[256] = "?";
      gethostname(host, sizeof host);
#ifdef NDEBUG
      const char* build = "release";
#else
      const char* build = "debug";
#endif
      std::printf("# fluxcpp_bench %d.%d.%d rev %s (%s build), MPI thread level %d\n",
                  version() / 10000, version() / 100 % 100, version() % 100, FLUXCPP_GIT_REV, build,
                  provided);
      std::printf(
          "# ranks %d, hosts %d (%d ranks per host), host %s, %u CPUs online, rank 0 cpuset %s\n",
          ctx.world_size(), ctx.num_hosts(), ctx.host_size(), host,
          std::thread::hardware_concurrency(), comm::process_cpuset().c_str());
      std::printf(
          "# threads per rank: %d compute + %d comm, binding %s, OpenBLAS threads %d, waits spin "
          "%g us then yield %g us, copy engine %s, copy offload %s\n",
          impl.config().compute_threads, impl.config().comm_threads,
          binding_name(impl.config().binding), kernels::blas_get_threads(), impl.config().spin_us,
          impl.config().yield_us, env_value("FLUXCPP_COPY_ENGINE").c_str(),
          impl.config().copy_offload ? "on" : "off");
      if (const char* link = std::getenv("FLUXCPP_BENCH_LINK"); link != nullptr && *link != '\0')
        std::printf(
            "# link: every host is joined to the others by a %s link (tc tbf on a private "
            "loopback); the fused ops' channel: %s; the unfused references: MPI over TCP\n",
            link, bench::store_channel() ? "gloo TCP (context from a store)" : "MPI over TCP");
      std::printf("# times: median [min max] over %d samples of the max over ranks%s\n",
                  settings.quick ? std::max(5, settings.samples / 3) : settings.samples,
                  settings.quick ? " (quick)" : "");
    }
    bench::Env env(ctx, settings, json);
    // "all" runs the link probe only in link mode (on one host it measures nothing of interest).
    const bool all = std::find(wanted.begin(), wanted.end(), "all") != wanted.end();
    for (const auto& e : bench::entries())
      if ((all && (e.first != "link_probe" || settings.link)) ||
          std::find(wanted.begin(), wanted.end(), e.first) != wanted.end())
        e.second(env);
    if (json != nullptr) std::fclose(json);
    ctx.close();
  } catch (const Error& e) {
    std::fprintf(stderr, "fluxcpp_bench: rank %d: %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
