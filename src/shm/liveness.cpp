#include "shm/liveness.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "shm/segment_name.hpp"

namespace fluxcpp::shm {

namespace {

// Removes /dev/shm/<entry> if no live process holds its liveness lock. True when removed.
bool remove_if_stale(int dir_fd, const char* entry) {
  // O_NONBLOCK: a FIFO someone placed under our prefix must not block the open; O_NOFOLLOW: nor
  // may a symlink lead us elsewhere. EACCES and the like: another user's segment, not ours to
  // judge.
  const int fd = openat(dir_fd, entry, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  bool removed = false;
  const std::string name = std::string("/") + entry;
  // Locked by a live process (EWOULDBLOCK): keep. Ours now: its creator is gone, unless the name
  // meanwhile went to another file.
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
      name_refers_to(name, fd))
    removed = shm_unlink(name.c_str()) == 0;
  close(fd);  // releases the lock, if we took it
  return removed;
}

}  // namespace

int remove_stale_segments() noexcept {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const std::size_t prefix = std::strlen(kSegmentPrefix);
  try {
    while (const dirent* e = readdir(dir)) {
      if (std::strncmp(e->d_name, kSegmentPrefix, prefix) != 0) continue;
      if (remove_if_stale(dirfd(dir), e->d_name)) ++removed;
    }
  } catch (...) {  // an allocation failed: the rest waits for the next sweep
  }
  closedir(dir);
  return removed;
}

}  // namespace fluxcpp::shm
