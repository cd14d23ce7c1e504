// post_completion: an elastic pool of detached threads.
#include "completions.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace fluxcpp::backend {
namespace {

struct Pool {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  int idle = 0, threads = 0;

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      ++idle;
      const bool woke = cv.wait_for(lock, std::chrono::seconds(1), [this] { return !jobs.empty(); });
      --idle;
      if (!woke && threads > 1) {  // idle for a second, and not the last thread
        --threads;
        return;
      }
      if (jobs.empty()) continue;
      auto fn = std::move(jobs.front());
      jobs.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: detached threads may use it until exit
  return *p;
}

}  // namespace

void post_completion(std::function<void()> fn) {
  Pool& p = pool();
  bool spawn;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.jobs.push_back(std::move(fn));
    spawn = p.idle < static_cast<int>(p.jobs.size());
    if (spawn) ++p.threads;
  }
  if (spawn)
    std::thread([&p] { p.run(); }).detach();
  else
    p.cv.notify_one();
}

}  // namespace fluxcpp::backend
