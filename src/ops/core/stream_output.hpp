// Whether a call writes its output with non-temporal stores (kernels::stream_copy): when the
// call's working set on the host (every host rank's input, staging and output) cannot stay in
// the last-level cache, so the output would be evicted before the caller reads it and ordinary
// stores only add a read of every line. FLUXCPP_STREAM_STORES=on|off overrides.
#pragma once

#include <cstddef>

#include "comm/config.hpp"
#include "comm/parts.hpp"
#include "kernels/stream_copy.hpp"

namespace fluxcpp::ops {

inline bool stream_output(const comm::Parts& c, std::size_t working_set) {
  const StreamStores how = c.runtime().config().stream_stores;
  if (how != StreamStores::kAuto) return how == StreamStores::kOn;
  return working_set > kernels::last_level_cache_bytes();
}

}  // namespace fluxcpp::ops
