// Copies that bypass the cache on their way to memory (non-temporal stores), for destinations
// that will not be read again soon: a large collective's output, which the caller reads after
// the call, long after the call's working set has evicted it.
#pragma once

#include <cstddef>

namespace fluxcpp::kernels {

// memcpy(dst, src, bytes), writing dst with non-temporal stores (no read for ownership of each
// destination line, nothing of dst left in the cache). The same bytes as memcpy; on CPUs without
// them, memcpy. The regions must not overlap.
void stream_copy(void* dst, const void* src, std::size_t bytes);

// The size in bytes of the last-level cache CPU 0 sits behind, as sysfs reports it (else sysconf,
// else 32 MiB).
std::size_t last_level_cache_bytes();

}  // namespace fluxcpp::kernels
