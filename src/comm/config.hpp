// Runtime settings: the context's config struct merged with FLUXCPP_* environment variables.
// Every variable is declared once, in config.cpp, with its default and help text.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "fluxcpp/context.hpp"
#include "log.hpp"

namespace fluxcpp {

enum class Binding : int { kNone = 0, kCore = 1 };
enum class CopyEngine : int { kAuto = 0, kShm = 1, kCma = 2 };
enum class StreamStores : int { kAuto = 0, kOn = 1, kOff = 2 };

struct EnvVar {
  const char* name;
  const char* default_value;
  const char* help;
};

// Every FLUXCPP_* variable the library reads.
const std::vector<EnvVar>& env_vars();

// Value of a declared variable: the environment's if set and non-empty, else its default.
std::string env_value(const char* name);

// A declared variable whose value is one of `choices`: returns its index. Raises
// kInvalidArgument "config: NAME='value' must be a, b or c" otherwise. Ops read their own
// settings with it (declared in env_vars() like every other, so --help-env lists them), inside
// their collective create so that a bad value fails on every rank.
int env_choice(const char* name, const char* const* choices, int n);
inline int env_choice(const char* name, std::initializer_list<const char*> choices) {
  return env_choice(name, choices.begin(), static_cast<int>(choices.size()));
}
// FLUXCPP_COPY_ENGINE's values in CopyEngine's order (parsed, and named when ranks disagree).
inline constexpr const char* kCopyEngineNames[] = {"auto", "shm", "cma"};

struct Config {
  double timeout_s = 60.0;
  int compute_threads = 1;
  int comm_threads = 1;
  Binding binding = Binding::kNone;
  LogLevel log_level = LogLevel::kWarn;
  double spin_us = 20.0;            // busy-wait budget of a signal wait before yielding
  double yield_us = 200.0;          // sched_yield budget before sleeping on the futex
  long chunk_bytes = 256 * 1024;    // pipeline chunk of the copy engines
  long net_chunk_bytes = 2L << 20;  // largest MPI message between hosts (comm/transport.hpp)
  CopyEngine copy_engine = CopyEngine::kAuto;
  long cma_min_bytes = 16 * 1024;
  double cma_max_ratio = 2.0;  // auto: cma when a single copy costs fewer memcpys (cma_speed.hpp)
  bool copy_offload = false;  // fused ops copy on a comm thread (ops/offload.hpp)
  // A large collective writes its output with non-temporal stores (ops/core/stream_output.hpp).
  StreamStores stream_stores = StreamStores::kAuto;
};

// Explicit options win over the environment, which wins over defaults. `cpus_per_rank` sizes
// the default compute pool; `oversubscribed` (more ranks on the host than CPUs) turns spinning
// off by default. Raises kInvalidArgument on malformed values.
Config resolve_config(const ContextOptions& options, int cpus_per_rank, bool oversubscribed);

// The timeout that bounds a context create, before the config is agreed on: the option, else
// FLUXCPP_TIMEOUT_S, else the default (a malformed value is reported by the create's own checks).
double create_timeout_s(const ContextOptions& options);

// Takes ranks_per_host from its former name ranks_per_node when only that one is set; returns ""
// or, when both are set and differ, the kInvalidArgument message (a local error of the create).
std::string resolve_host_grouping(ContextOptions& options);

const char* binding_name(Binding b);

}  // namespace fluxcpp
