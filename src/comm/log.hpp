// A small logger whose lines carry the rank: "[fluxcpp 2/4 warn] message".
#pragma once

#include <fmt/format.h>

#include <string>

#include "comm/config.hpp"

namespace fluxcpp {

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
