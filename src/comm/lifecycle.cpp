#include "comm/lifecycle.hpp"

#include <unistd.h>

#include "error_util.hpp"

namespace fluxcpp::comm {

void Lifecycle::check_process(const char* what) const {
  if (!creator_.here())
    raise(Errc::kInvalidUsage,
          "{}: this process (pid {}) is a copy made by fork() of process {}, which created the "
          "context: a context and its ops work only in the process that created them (create "
          "contexts in the child, or start children with the spawn method; see 'Processes' in "
          "docs/api.md)",
          what, static_cast<long>(getpid()), static_cast<long>(creator_.pid()));
}

void Lifecycle::check_usable(const char* what) const {
  check_process(what);
  if (closed_) raise(Errc::kInvalidUsage, "{}: the context was closed", what);
  if (!broken_.empty())
    raise(Errc::kInvalidUsage,
          "{}: the context failed earlier and can only be destroyed (first failure: {})", what,
          broken_);
}

uint64_t Lifecycle::begin_op_create(const char* op) {
  ++op_serial_;
  creating_tag_ = fmt::format("{}{}", op, op_serial_);
  return op_serial_;
}

}  // namespace fluxcpp::comm
