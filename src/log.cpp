#include "log.hpp"

#include <atomic>
#include <cstdio>

namespace fluxcpp {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
std::atomic<int> g_rank{-1};
std::atomic<int> g_size{0};
}  // namespace

const char* log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

void log_set(LogLevel level, int rank, int world_size) {
  g_level.store(static_cast<int>(level));
  g_rank.store(rank);
  g_size.store(world_size);
}

bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void log_write(LogLevel level, const std::string& message) {
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "[fluxcpp %d/%d %s] %s\n", g_rank.load(), g_size.load(),
               log_level_name(level), message.c_str());
}

}  // namespace fluxcpp
