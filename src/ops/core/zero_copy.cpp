#include "ops/core/zero_copy.hpp"

#include <fmt/format.h>

namespace fluxcpp::ops {

void* ZeroCopyInput::acquire(OpCore& core, char* slot) {
  ContextEntry entry(core.parts(), core.op());
  core.check_usable();
  core.wait_released();
  armed_ = true;
  return slot;
}

bool ZeroCopyInput::check(const OpCore& core, const char* slot, const void* input,
                          std::size_t input_bytes,
                          std::initializer_list<std::pair<const void*, std::size_t>> outputs,
                          CallDescriptor& d) {
  const bool armed = armed_;
  armed_ = false;  // one forward per input_buffer()
  const int r = core.parts().topo().world_rank();
  const char* in = static_cast<const char*>(input);
  const bool zero_copy = slot != nullptr && in == slot;
  if (!d.error.empty()) return zero_copy;
  for (const auto& [p, bytes] : outputs)
    if (p != nullptr && bytes > 0 && core.layout().overlaps(p, bytes)) {
      d.error = fmt::format("{}: an output overlaps the op's own buffers (rank {})", core.op(), r);
      return zero_copy;
    }
  if (slot != nullptr && !zero_copy && in != nullptr && input_bytes > 0 &&
      core.layout().overlaps(in, input_bytes)) {
    d.error = fmt::format(
        "{}: input overlaps the op's buffers without starting at this rank's input buffer "
        "(rank {})",
        core.op(), r);
    return zero_copy;
  }
  if (zero_copy && !armed) {
    d.error = fmt::format(
        "{}: input is the op's input buffer, but input_buffer() was not called since this rank's "
        "previous forward (rank {})",
        core.op(), r);
    d.error_code = Errc::kInvalidUsage;
  }
  return zero_copy;
}

}  // namespace fluxcpp::ops
