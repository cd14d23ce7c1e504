// A small logger whose lines carry the rank: "[fluxcpp 2/4 warn] message". It knows nothing of
// MPI or of the context: the context tells it the level and the rank (log_set), and every layer,
// shm included, may log.
#pragma once

#include <fmt/format.h>

#include <string>

namespace fluxcpp {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

const char* log_level_name(LogLevel l);

// Process-wide; the last context created sets it. Until then: warn, rank -1 of 0.
void log_set(LogLevel level, int rank, int world_size);
bool log_enabled(LogLevel level);
void log_write(LogLevel level, const std::string& message);

}  // namespace fluxcpp

#define FLUXCPP_LOG(level, ...)                                                                 \
  do {                                                                                          \
    if (::fluxcpp::log_enabled(level)) ::fluxcpp::log_write(level, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define FLUXCPP_LOG_WARN(...) FLUXCPP_LOG(::fluxcpp::LogLevel::kWarn, __VA_ARGS__)
#define FLUXCPP_LOG_INFO(...) FLUXCPP_LOG(::fluxcpp::LogLevel::kInfo, __VA_ARGS__)
#define FLUXCPP_LOG_DEBUG(...) FLUXCPP_LOG(::fluxcpp::LogLevel::kDebug, __VA_ARGS__)
