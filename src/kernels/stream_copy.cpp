#include "kernels/stream_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include <unistd.h>

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#define FLUXCPP_STREAM_X86 1
#include <emmintrin.h>
#endif

namespace fluxcpp::kernels {

void stream_copy(void* dst, const void* src, std::size_t bytes) {
#ifdef FLUXCPP_STREAM_X86
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  constexpr std::size_t kLine = 64;
  // Up to the first whole line of dst with ordinary stores; then whole lines streamed.
  const std::size_t head =
      std::min(bytes, (kLine - reinterpret_cast<std::uintptr_t>(d) % kLine) % kLine);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const std::size_t lines = bytes / kLine;
  for (std::size_t i = 0; i < lines; ++i, d += kLine, s += kLine) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  _mm_sfence();  // the streamed lines are visible (to a signal's reader) before what follows
  std::memcpy(d, s, bytes - lines * kLine);
#else
  std::memcpy(dst, src, bytes);
#endif
}

namespace {
// The size of CPU 0's highest-level cache from sysfs ("32768K"), or 0. (sysconf's
// _SC_LEVEL3_CACHE_SIZE can report the whole package's L3, e.g. 384 MiB in a VM whose
// sysfs and lscpu say 32 MiB.)
std::size_t sysfs_last_level_cache() {
  std::size_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int lv = 0;
    std::string sz;
    if (!(level >> lv) || !(size >> sz) || sz.empty()) continue;
    std::size_t v = 0;
    std::size_t pos = 0;
    while (pos < sz.size() && sz[pos] >= '0' && sz[pos] <= '9') v = v * 10 + (sz[pos++] - '0');
    const char unit = pos < sz.size() ? sz[pos] : ' ';
    v <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    if (lv > best_level || (lv == best_level && v > best)) best = v, best_level = lv;
  }
  return best;
}
}  // namespace

std::size_t last_level_cache_bytes() {
  static const std::size_t bytes = [] {
    std::size_t b = sysfs_last_level_cache();
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (b == 0) {
      const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
      if (l3 > 0) b = static_cast<std::size_t>(l3);
    }
#endif
    return b > 0 ? b : std::size_t{32} << 20;
  }();
  return bytes;
}

}  // namespace fluxcpp::kernels
