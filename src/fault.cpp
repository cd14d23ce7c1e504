#include "fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace fluxcpp {

namespace {

struct Fault {
  std::string point;
  int rank = -1;
  int signal = SIGKILL;  // 0: delay (sleep kDelay instead)
  int nth = 1;
  std::atomic<int> seen{0};
};

const Fault* parse() {
  static Fault f;
  static const bool active = [] {
    const char* v = std::getenv("FLUXCPP_TEST_FAULT");
    if (v == nullptr || *v == '\0') return false;
    const std::string s = v;
    const auto c1 = s.find(':');
    if (c1 == std::string::npos) return false;
    f.point = s.substr(0, c1);
    f.rank = std::atoi(s.c_str() + c1 + 1);
    const auto c2 = s.find(':', c1 + 1);
    if (c2 != std::string::npos) {
      const std::string rest = s.substr(c2 + 1);
      f.signal = rest.rfind("stop", 0) == 0 ? SIGSTOP : rest.rfind("delay", 0) == 0 ? 0 : SIGKILL;
      const auto c3 = rest.find(':');
      if (c3 != std::string::npos) f.nth = std::max(1, std::atoi(rest.c_str() + c3 + 1));
    }
    return true;
  }();
  return active ? &f : nullptr;
}

}  // namespace

void fault_point(const char* point, int world_rank) noexcept {
#ifndef FLUXCPP_FAULT_INJECTION
  // A library not built for the failure tests: the variable means nothing.
  (void)point;
  (void)world_rank;
  return;
#endif
  const Fault* f = parse();
  if (f == nullptr || world_rank != f->rank || f->point != point) return;
  if (const_cast<Fault*>(f)->seen.fetch_add(1) + 1 != f->nth) return;
  std::fprintf(stderr, "[fluxcpp %d] FLUXCPP_TEST_FAULT: %s at %s\n", world_rank,
               f->signal == SIGSTOP ? "stopping" : f->signal == 0 ? "delaying 3 s" : "killing",
               point);
  std::fflush(stderr);
  if (f->signal == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return;
  }
  ::raise(f->signal);
}

bool fault_shm_full(unsigned long long bytes) noexcept {
#ifndef FLUXCPP_FAULT_INJECTION
  (void)bytes;
  return false;
#else
  static const unsigned long long limit = [] {
    const char* v = std::getenv("FLUXCPP_TEST_SHM_FULL_BYTES");
    return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : 0ull;
  }();
  return limit != 0 && bytes >= limit;
#endif
}

}  // namespace fluxcpp
