#include "comm/deadline_scope.hpp"

#include <utility>

namespace fluxcpp::comm {

namespace {
thread_local Deadline t_scope_deadline = Deadline::max();
thread_local std::string t_scope_what;
}  // namespace

DeadlineScope::DeadlineScope(Deadline deadline, std::string what)
    : saved_(t_scope_deadline), saved_what_(std::move(t_scope_what)) {
  t_scope_deadline = deadline;
  t_scope_what = std::move(what);
}

DeadlineScope::~DeadlineScope() {
  t_scope_deadline = saved_;
  t_scope_what = std::move(saved_what_);
}

Deadline DeadlineScope::current() {
  return t_scope_deadline;
}

const std::string& DeadlineScope::context() {
  return t_scope_what;
}

}  // namespace fluxcpp::comm
