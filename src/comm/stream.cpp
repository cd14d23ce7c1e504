#include "comm/stream.hpp"

#include <pthread.h>

namespace fluxcpp::comm {

Stream::Stream(std::string name, shm::WaitPolicy policy, std::function<void()> on_start)
    : name_(std::move(name)), policy_(policy) {
  thread_ = std::thread([this, f = std::move(on_start)]() mutable { run(std::move(f)); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    ++next_ticket_;
  }
  shm::signal_set(submitted_, next_ticket_);
  if (thread_.joinable()) thread_.join();
}

uint64_t Stream::enqueue(std::function<void()> task) {
  uint64_t t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(task));
    t = ++next_ticket_;
  }
  shm::signal_max(submitted_, t);
  return t;
}

bool Stream::wait(uint64_t ticket, std::chrono::steady_clock::time_point deadline) {
  bool ok = shm::signal_wait(completed_, ticket, deadline, policy_);
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = errors_.find(ticket);
    if (it != errors_.end()) {
      e = it->second;
      errors_.erase(it);
    }
  }
  if (e) std::rethrow_exception(e);
  return ok;
}

Event Stream::record() {
  std::lock_guard<std::mutex> lk(mu_);
  return Event{this, next_ticket_};
}

bool Event::query() const {
  return stream == nullptr || stream->completed() >= ticket;
}

bool Event::wait(std::chrono::steady_clock::time_point deadline) const {
  return stream == nullptr || stream->wait(ticket, deadline);
}

void Stream::run(std::function<void()> on_start) {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  if (on_start) on_start();
  uint64_t done = 0;
  const auto forever = std::chrono::steady_clock::time_point::max();
  for (;;) {
    shm::signal_wait(submitted_, done + 1, forever, policy_);
    std::function<void()> task;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (queue_.empty()) {
        if (stop_) return;
        continue;
      }
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    ++done;
    try {
      task();
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      errors_[done] = std::current_exception();
    }
    shm::signal_set(completed_, done);
  }
}

}  // namespace fluxcpp::comm
