#include "comm/runtime.hpp"

#include <fmt/format.h>

#include "comm/affinity.hpp"

namespace fluxcpp::comm {

void Runtime::configure(const Config& config) {
  config_ = config;
  policy_.spin = std::chrono::nanoseconds(static_cast<long long>(config_.spin_us * 1e3));
  policy_.yield = std::chrono::nanoseconds(static_cast<long long>(config_.yield_us * 1e3));
}

void Runtime::start_threads() {
  int index = 0;
  for (int i = 0; i < config_.comm_threads; ++i, ++index)
    comm_streams_.push_back(
        std::make_unique<Stream>(fmt::format("fluxcpp-comm{}", i), policy_,
                                 [b = config_.binding, index] { bind_current_thread(b, index); }));
  for (int i = 0; i < config_.compute_threads; ++i, ++index)
    compute_.push_back(
        std::make_unique<Stream>(fmt::format("fluxcpp-gemm{}", i), policy_,
                                 [b = config_.binding, index] { bind_current_thread(b, index); }));
}

void Runtime::stop() noexcept {
  comm_streams_.clear();
  compute_.clear();
}

void Runtime::abandon() noexcept {
  for (auto& s : comm_streams_) (void)s.release();
  for (auto& s : compute_) (void)s.release();
  comm_streams_.clear();
  compute_.clear();
}

}  // namespace fluxcpp::comm
