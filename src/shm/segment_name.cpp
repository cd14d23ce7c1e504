#include "shm/segment_name.hpp"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "error_util.hpp"

namespace fluxcpp::shm {

namespace {

std::atomic<RandomSource> g_random{nullptr};

void kernel_random(unsigned char* buf, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(buf + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) raise_errno(r < 0 ? errno : EIO, "shm: getrandom for a segment name");
    got += static_cast<std::size_t>(r);
  }
}

bool valid_tag(const std::string& tag) {
  if (tag.empty() || tag.size() > 64) return false;
  for (const char ch : tag) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string unique_segment_name(const std::string& tag) {
  if (!valid_tag(tag)) raise(Errc::kInternal, "shm: invalid segment tag \"{}\"", tag);
  unsigned char bits[kNameRandomBytes];
  const RandomSource source = g_random.load(std::memory_order_acquire);
  (source != nullptr ? source : kernel_random)(bits, sizeof bits);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * sizeof bits, '0');
  for (std::size_t i = 0; i < sizeof bits; ++i) {
    hex[2 * i] = kHex[bits[i] >> 4];
    hex[2 * i + 1] = kHex[bits[i] & 0xF];
  }
  return fmt::format("/{}{}-{}-{}", kSegmentPrefix, static_cast<long>(getpid()), tag, hex);
}

RandomSource set_random_for_testing(RandomSource source) noexcept {
  return g_random.exchange(source, std::memory_order_acq_rel);
}

bool name_refers_to(const std::string& name, int fd) noexcept {
  struct stat by_fd {};
  struct stat by_name {};
  if (fstat(fd, &by_fd) != 0) return false;
  if (lstat(("/dev/shm" + name).c_str(), &by_name) != 0) return false;
  return by_fd.st_dev == by_name.st_dev && by_fd.st_ino == by_name.st_ino;
}

}  // namespace fluxcpp::shm
