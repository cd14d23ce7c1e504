#include "comm/config.hpp"

#include <iterator>

#include <cstdlib>
#include <string>

#include "error_util.hpp"

#include <fmt/format.h>

namespace fluxcpp {

// env_choice returns the index of the value in its list: the lists below follow the enums.
static_assert(static_cast<int>(Binding::kCore) == 1 && static_cast<int>(LogLevel::kDebug) == 3 &&
                  static_cast<int>(CopyEngine::kCma) == 2 &&
                  static_cast<int>(StreamStores::kOff) == 2,
              "choice lists follow the enum order");

const std::vector<EnvVar>& env_vars() {
  static const std::vector<EnvVar> vars = {
      {"FLUXCPP_TIMEOUT_S", "60",
       "seconds a rank waits for a peer's signal before failing with FLUXCPP_ERROR_TIMEOUT; "
       "inf (or a value beyond what a deadline can hold, e.g. 1e10): wait forever"},
      {"FLUXCPP_COMPUTE_THREADS", "0",
       "GEMM workers per rank; 0: the CPUs this rank may use divided by the ranks sharing them"},
      {"FLUXCPP_COMM_THREADS", "1", "copy/progress threads (streams) per rank"},
      {"FLUXCPP_BIND", "none",
       "thread binding: none, or core (one core of the rank's cpuset each)"},
      {"FLUXCPP_LOG_LEVEL", "warn", "error, warn, info or debug; messages carry the rank"},
      {"FLUXCPP_SPIN_US", "auto",
       "microseconds a wait spins before yielding the core; auto: 20, or 0 when the host runs "
       "more ranks than it has CPUs (spinning would steal the core the producer needs)"},
      {"FLUXCPP_YIELD_US", "200", "microseconds a wait yields before sleeping on a futex"},
      {"FLUXCPP_CHUNK_KB", "256", "pipeline chunk of the copy engines, in KiB"},
      {"FLUXCPP_NET_CHUNK_KB", "2048",
       "largest MPI message between hosts, in KiB: a consumer starts on a block once its first "
       "chunk has landed; each chunk costs a rendezvous round trip"},
      {"FLUXCPP_COPY_ENGINE", "auto",
       "intra-host copies: shm (staged through shared memory), cma (single copy from the peer's "
       "memory, process_vm_readv), or auto (cma from FLUXCPP_CMA_MIN_KB up, when permitted and "
       "when a probe at the op's create finds a single copy of 1 MiB cheaper than two memcpys)"},
      {"FLUXCPP_CMA_MIN_KB", "16", "smallest per-rank block, in KiB, that auto sends through cma"},
      {"FLUXCPP_CMA_MAX_RATIO", "2",
       "auto takes cma only when one process_vm_readv of 1 MiB, measured at the op's create, "
       "costs fewer than this many memcpys of 1 MiB (a single copy replaces two); 0: never, "
       "1e9: whenever permitted"},
      {"FLUXCPP_COPY_OFFLOAD", "auto",
       "on: the fused GEMM ops (ag_gemm, gemm_rs on one host, the all-to-all family) move or "
       "reduce data on a comm thread while the calling thread computes; "
       "off: the calling thread does both; auto: on when the rank has a CPU beyond its compute "
       "threads"},
      {"FLUXCPP_STREAM_STORES", "auto",
       "the output of all_reduce (and gemm_ar's all-reduce), all_gather and all_to_all_single "
       "written with non-temporal stores, around the cache (no read of each line before it is "
       "written): on, off, or auto "
       "(when the host's ranks' inputs, outputs and exchange buffers of the call exceed the "
       "last-level cache)"},
      {"FLUXCPP_LAUNCH_GUARD", "on",
       "on: a context over an MPI_COMM_WORLD of one rank fails when the launcher's environment "
       "(WORLD_SIZE, SLURM_STEP_NUM_TASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE, MV2_COMM_WORLD_SIZE) "
       "says it started more processes; off: allow one-rank contexts in such a job"},
      {"FLUXCPP_AG_GEMM_MODE", "auto",
       "ag_gemm: zero_copy (GEMM blocks read host peers' rows in their segments as they land), "
       "copy (gather the host's rows locally, then one GEMM) or auto (copy when n >= m/W)"},
  };
  return vars;
}

std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v != nullptr && *v != '\0') return v;
  for (const auto& e : env_vars())
    if (std::string(e.name) == name) return e.default_value;
  raise(Errc::kInternal, "config: undeclared variable {}", name);
}

int env_choice(const char* name, const char* const* choices, int n) {
  const std::string v = env_value(name);
  std::string list;  // "a, b or c"
  for (int i = 0; i < n; ++i) {
    if (v == choices[i]) return i;
    if (i > 0) list += i + 1 == n ? " or " : ", ";
    list += choices[i];
  }
  raise(Errc::kInvalidArgument, "config: {}='{}' must be {}", name, v, list);
}

namespace {

double parse_double(const char* name, double lo, double hi) {
  std::string s = env_value(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  FLUXCPP_CHECK_ARG(end != s.c_str() && *end == '\0' && v >= lo && v <= hi,
                    "config: {}='{}' is not a number in [{}, {}]", name, s, lo, hi);
  return v;
}

long parse_long(const char* name, long lo, long hi) {
  std::string s = env_value(name);
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  FLUXCPP_CHECK_ARG(end != s.c_str() && *end == '\0' && v >= lo && v <= hi,
                    "config: {}='{}' is not an integer in [{}, {}]", name, s, lo, hi);
  return v;
}

// Seconds > 0, or inf / anything beyond a deadline's range (wait forever). strtod also reads
// "nan" and negative numbers, which are errors.
double parse_timeout(const char* name) {
  std::string s = env_value(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  FLUXCPP_CHECK_ARG(end != s.c_str() && *end == '\0' && v > 0,
                    "config: {}='{}' must be a number of seconds > 0, or inf to wait forever", name,
                    s);
  return v;
}

}  // namespace

Config resolve_config(const ContextOptions& o, int cpus_per_rank, bool oversubscribed) {
  // NaN fails the comparison, so it is rejected with negative values.
  FLUXCPP_CHECK_ARG(o.timeout_s >= 0.0,
                    "context: timeout_s={} must be >= 0 (0: FLUXCPP_TIMEOUT_S or its default; "
                    "inf: wait forever)",
                    o.timeout_s);
  FLUXCPP_CHECK_ARG(o.compute_threads >= 0 && o.compute_threads <= 1024,
                    "context: compute_threads={} must be in [0, 1024]", o.compute_threads);
  FLUXCPP_CHECK_ARG(o.comm_threads >= 0 && o.comm_threads <= 64,
                    "context: comm_threads={} must be in [0, 64]", o.comm_threads);
  Config c;
  c.timeout_s = o.timeout_s > 0 ? o.timeout_s : parse_timeout("FLUXCPP_TIMEOUT_S");
  long ct =
      o.compute_threads > 0 ? o.compute_threads : parse_long("FLUXCPP_COMPUTE_THREADS", 0, 1024);
  c.compute_threads = ct > 0 ? static_cast<int>(ct) : (cpus_per_rank > 0 ? cpus_per_rank : 1);
  long mt = o.comm_threads > 0 ? o.comm_threads : parse_long("FLUXCPP_COMM_THREADS", 1, 64);
  c.comm_threads = static_cast<int>(mt);

  c.binding = static_cast<Binding>(env_choice("FLUXCPP_BIND", {"none", "core"}));
  c.log_level =
      static_cast<LogLevel>(env_choice("FLUXCPP_LOG_LEVEL", {"error", "warn", "info", "debug"}));

  c.spin_us = env_value("FLUXCPP_SPIN_US") == "auto" ? (oversubscribed ? 0.0 : 20.0)
                                                     : parse_double("FLUXCPP_SPIN_US", 0, 1e6);
  c.yield_us = parse_double("FLUXCPP_YIELD_US", 0, 1e6);
  c.chunk_bytes = parse_long("FLUXCPP_CHUNK_KB", 4, 1L << 20) * 1024;
  c.net_chunk_bytes = parse_long("FLUXCPP_NET_CHUNK_KB", 4, 1L << 20) * 1024;
  c.copy_engine =
      static_cast<CopyEngine>(env_choice("FLUXCPP_COPY_ENGINE", kCopyEngineNames,
                                         static_cast<int>(std::size(kCopyEngineNames))));
  c.cma_min_bytes = parse_long("FLUXCPP_CMA_MIN_KB", 0, 1L << 30) * 1024;
  c.cma_max_ratio = parse_double("FLUXCPP_CMA_MAX_RATIO", 0, 1e12);
  const int off = env_choice("FLUXCPP_COPY_OFFLOAD", {"auto", "on", "off"});
  c.copy_offload = off == 0 ? cpus_per_rank > c.compute_threads : off == 1;
  c.stream_stores =
      static_cast<StreamStores>(env_choice("FLUXCPP_STREAM_STORES", {"auto", "on", "off"}));
  return c;
}

const char* binding_name(Binding b) {
  return b == Binding::kCore ? "core" : "none";
}

std::string resolve_host_grouping(ContextOptions& o) {
  int& former = o.ranks_per_node;
  if (former == 0 || former == o.ranks_per_host) return "";
  if (o.ranks_per_host == 0) {
    o.ranks_per_host = former;
    return "";
  }
  return fmt::format(
      "context: ranks_per_host={} and ranks_per_node={} (its former name) differ; set one",
      o.ranks_per_host, former);
}

double create_timeout_s(const ContextOptions& o) {
  if (o.timeout_s > 0) return o.timeout_s;
  const char* v = std::getenv("FLUXCPP_TIMEOUT_S");
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (*end == '\0' && t > 0) return t;
  }
  return Config{}.timeout_s;
}

}  // namespace fluxcpp
