#include "comm/config.hpp"

#include <cstdlib>
#include <string>

#include "error_util.hpp"

namespace fluxcpp {

const std::vector<EnvVar>& env_vars() {
  static const std::vector<EnvVar> vars = {
      {"FLUXCPP_TIMEOUT_S", "60",
       "seconds a rank waits for a peer's signal before failing with FLUXCPP_ERROR_TIMEOUT"},
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
      {"FLUXCPP_COPY_ENGINE", "auto",
       "intra-host copies: shm (staged through shared memory), cma (single copy from the peer's "
       "memory, process_vm_readv), or auto (cma from FLUXCPP_CMA_MIN_KB up, when permitted)"},
      {"FLUXCPP_CMA_MIN_KB", "16", "smallest per-rank block, in KiB, that auto sends through cma"},
      {"FLUXCPP_COPY_OFFLOAD", "auto",
       "on: the fused GEMM ops (ag_gemm, gemm_rs on one host, the all-to-all family) move or "
       "reduce data on a comm thread while the calling thread computes; "
       "off: the calling thread does both; auto: on when the rank has a CPU beyond its compute "
       "threads"},
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

}  // namespace

Config resolve_config(const ContextOptions& o, int cpus_per_rank, bool oversubscribed) {
  FLUXCPP_CHECK_ARG(o.timeout_s >= 0.0, "context: timeout_s={} must be >= 0", o.timeout_s);
  FLUXCPP_CHECK_ARG(o.compute_threads >= 0 && o.compute_threads <= 1024,
                    "context: compute_threads={} must be in [0, 1024]", o.compute_threads);
  FLUXCPP_CHECK_ARG(o.comm_threads >= 0 && o.comm_threads <= 64,
                    "context: comm_threads={} must be in [0, 64]", o.comm_threads);
  Config c;
  c.timeout_s = o.timeout_s > 0 ? o.timeout_s : parse_double("FLUXCPP_TIMEOUT_S", 1e-3, 1e9);
  FLUXCPP_CHECK_ARG(c.timeout_s > 0, "context: timeout_s must be > 0");
  long ct =
      o.compute_threads > 0 ? o.compute_threads : parse_long("FLUXCPP_COMPUTE_THREADS", 0, 1024);
  c.compute_threads = ct > 0 ? static_cast<int>(ct) : (cpus_per_rank > 0 ? cpus_per_rank : 1);
  long mt = o.comm_threads > 0 ? o.comm_threads : parse_long("FLUXCPP_COMM_THREADS", 1, 64);
  c.comm_threads = static_cast<int>(mt);

  std::string bind = env_value("FLUXCPP_BIND");
  if (bind == "none") {
    c.binding = Binding::kNone;
  } else if (bind == "core") {
    c.binding = Binding::kCore;
  } else {
    raise(Errc::kInvalidArgument, "config: FLUXCPP_BIND='{}' must be none or core", bind);
  }
  std::string lvl = env_value("FLUXCPP_LOG_LEVEL");
  if (lvl == "error")
    c.log_level = LogLevel::kError;
  else if (lvl == "warn")
    c.log_level = LogLevel::kWarn;
  else if (lvl == "info")
    c.log_level = LogLevel::kInfo;
  else if (lvl == "debug")
    c.log_level = LogLevel::kDebug;
  else
    raise(Errc::kInvalidArgument,
          "config: FLUXCPP_LOG_LEVEL='{}' must be error, warn, info or debug", lvl);

  c.spin_us = env_value("FLUXCPP_SPIN_US") == "auto" ? (oversubscribed ? 0.0 : 20.0)
                                                     : parse_double("FLUXCPP_SPIN_US", 0, 1e6);
  c.yield_us = parse_double("FLUXCPP_YIELD_US", 0, 1e6);
  c.chunk_bytes = parse_long("FLUXCPP_CHUNK_KB", 4, 1L << 20) * 1024;
  std::string engine = env_value("FLUXCPP_COPY_ENGINE");
  if (engine == "auto")
    c.copy_engine = CopyEngine::kAuto;
  else if (engine == "shm")
    c.copy_engine = CopyEngine::kShm;
  else if (engine == "cma")
    c.copy_engine = CopyEngine::kCma;
  else
    raise(Errc::kInvalidArgument, "config: FLUXCPP_COPY_ENGINE='{}' must be auto, shm or cma",
          engine);
  c.cma_min_bytes = parse_long("FLUXCPP_CMA_MIN_KB", 0, 1L << 30) * 1024;
  std::string off = env_value("FLUXCPP_COPY_OFFLOAD");
  if (off == "auto")
    c.copy_offload = cpus_per_rank > c.compute_threads;
  else if (off == "on" || off == "off")
    c.copy_offload = off == "on";
  else
    raise(Errc::kInvalidArgument, "config: FLUXCPP_COPY_OFFLOAD='{}' must be auto, on or off", off);
  std::string agm = env_value("FLUXCPP_AG_GEMM_MODE");
  if (agm == "auto")
    c.ag_gemm_mode = 0;
  else if (agm == "zero_copy")
    c.ag_gemm_mode = 1;
  else if (agm == "copy")
    c.ag_gemm_mode = 2;
  else
    raise(Errc::kInvalidArgument,
          "config: FLUXCPP_AG_GEMM_MODE='{}' must be auto, zero_copy or copy", agm);
  return c;
}

const char* binding_name(Binding b) {
  return b == Binding::kCore ? "core" : "none";
}

}  // namespace fluxcpp
