#include "shm/segment.hpp"

#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <utility>

#include "error_util.hpp"
#include "fault.hpp"
#include "log.hpp"

namespace fluxcpp::shm {

namespace {

std::size_t page_round(std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t b = bytes == 0 ? page : bytes;
  return (b + page - 1) / page * page;
}

std::string shm_free_text() {
  struct statvfs st {};
  if (statvfs("/dev/shm", &st) != 0) return "free space unknown";
  double free_mib = static_cast<double>(st.f_bavail) * st.f_frsize / (1024.0 * 1024.0);
  double total_mib = static_cast<double>(st.f_blocks) * st.f_frsize / (1024.0 * 1024.0);
  return fmt::format("{:.1f} MiB free of {:.1f} MiB", free_mib, total_mib);
}

// Prefer the NUMA node of the CPU we run on for the segment's pages. Best effort: a failure
// only costs locality, so it is logged, not raised.
void bind_local(void* addr, std::size_t bytes) {
  if (numa_available() < 0 || numa_max_node() == 0) return;
  int cpu = sched_getcpu();
  int node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
  if (node < 0) return;
  unsigned long mask[16] = {};
  if (node >= static_cast<int>(sizeof(mask) * 8)) return;
  mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
  if (mbind(addr, bytes, MPOL_PREFERRED, mask, sizeof(mask) * 8, 0) != 0)
    FLUXCPP_LOG_DEBUG("shm: mbind to node {} failed: {}", node, std::strerror(errno));
}

// One attempt at a fresh name: the fd, locked and still named by `name`, or -1 with errno set
// (EEXIST: taken; EAGAIN: a cleaner got to it first; anything else: fatal).
int create_locked(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    // A cleaner opened the fresh file before us and holds the lock; it removes the name once it
    // sees the name still refers to the file. Remove it ourselves too: it must not outlive us.
    const int err = errno;
    if (name_refers_to(name, fd)) shm_unlink(name.c_str());
    close(fd);
    errno = err == EWOULDBLOCK ? EAGAIN : err;
    return -1;
  }
  // The mode exactly, whatever the umask: peers (this user) open it read-write, nobody else.
  if (fchmod(fd, 0600) != 0) {
    const int err = errno;
    if (name_refers_to(name, fd)) shm_unlink(name.c_str());
    close(fd);
    errno = err;
    return -1;
  }
  // A cleaner may have locked, checked and removed the name between shm_open and flock.
  if (!name_refers_to(name, fd)) {
    close(fd);
    errno = EAGAIN;
    return -1;
  }
  return fd;
}

}  // namespace

Segment Segment::create(const std::string& tag, std::size_t bytes) {
  int fd = -1;
  int taken = 0, lost = 0;
  std::string name;
  for (int attempt = 0; attempt < kCreateAttempts && fd < 0; ++attempt) {
    name = unique_segment_name(tag);
    fd = create_locked(name);
    if (fd >= 0) break;
    if (errno == EEXIST) {
      ++taken;
    } else if (errno == EAGAIN) {
      ++lost;
    } else {
      raise_errno(errno, "shm: cannot create segment {} in /dev/shm", name);
    }
  }
  if (fd < 0)
    raise(Errc::kSystem,
          "shm: cannot create a segment for {} in /dev/shm: {} fresh random names in a row were "
          "taken already ({}) or removed by a cleaner at once ({})",
          tag, kCreateAttempts, taken, lost);
  return adopt_created(fd, std::move(name), bytes);
}

Segment Segment::create_named(const std::string& name, std::size_t bytes) {
  int fd = create_locked(name);
  // EAGAIN: a cleaner opened the fresh file before we locked it and removed the name; the name
  // is ours again.
  for (int attempt = 1; fd < 0 && errno == EAGAIN && attempt < kCreateAttempts; ++attempt)
    fd = create_locked(name);
  if (fd < 0 && errno == EEXIST)
    raise(Errc::kInvalidUsage,
          "shm: segment {} exists already in /dev/shm (its name was used before, or is being "
          "used by another process)",
          name);
  if (fd < 0) raise_errno(errno, "shm: cannot create segment {} in /dev/shm", name);
  return adopt_created(fd, name, bytes);
}

Segment Segment::adopt_created(int fd, std::string name, std::size_t bytes) {
  Segment s;
  s.size_ = page_round(bytes);
  s.name_ = std::move(name);
  // From here on the destructor removes the name (and releases the lock) on any error.
  s.lock_fd_ = fd;
  s.creator_ = getpid();
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    s.dev_ = st.st_dev;
    s.ino_ = st.st_ino;
  }
  if (ftruncate(fd, static_cast<off_t>(s.size_)) != 0)
    raise_errno(errno, "shm: cannot size segment {} to {} bytes", s.name_, s.size_);
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    raise_errno(errno, "shm: cannot map segment {} ({} bytes)", s.name_, s.size_);
  s.data_ = p;
  bind_local(p, s.size_);
  // Reserve every page now: tmpfs allocates lazily and would SIGBUS on first touch if full.
  const int rc =
      fault_shm_full(s.size_) ? ENOSPC : posix_fallocate(fd, 0, static_cast<off_t>(s.size_));
  if (rc == ENOSPC || rc == ENOMEM)
    raise(Errc::kSystem, "shm: /dev/shm is full: cannot reserve {} bytes for segment {} ({})",
          s.size_, s.name_, shm_free_text());
  if (rc != 0) raise_errno(rc, "shm: cannot reserve {} bytes for segment {}", s.size_, s.name_);
  return s;
}

Segment Segment::open(const std::string& name, std::size_t bytes) {
  Segment s;
  if (!open_sized(name, bytes, /*missing_ok=*/false, &s)) raise(Errc::kInternal, "shm: open");
  return s;
}

bool Segment::try_open(const std::string& name, std::size_t bytes, Segment* out) {
  return open_sized(name, bytes, /*missing_ok=*/true, out);
}

bool Segment::open_sized(const std::string& name, std::size_t bytes, bool missing_ok,
                         Segment* out) {
  Segment s;
  s.size_ = page_round(bytes);
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0 && missing_ok && errno == ENOENT) return false;
  if (fd < 0) raise_errno(errno, "shm: cannot open peer segment {}", name);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    raise_errno(err, "shm: cannot stat peer segment {}", name);
  }
  // Only this user's, readable by nobody else (as create_locked makes them): a segment another
  // user made under the name, or one opened up to others, is never trusted.
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    raise(Errc::kInvalidUsage,
          "shm: segment {} belongs to uid {} with mode {:o}, not to this user (uid {}) with "
          "mode 600: another user's, refusing it",
          name, static_cast<long>(st.st_uid), static_cast<unsigned>(st.st_mode & 0777),
          static_cast<long>(geteuid()));
  }
  if (bytes == 0) s.size_ = static_cast<std::size_t>(st.st_size);  // any size
  if (static_cast<std::size_t>(st.st_size) != s.size_ || st.st_size == 0) {
    close(fd);
    // Created but not sized yet: its creator is between shm_open and ftruncate.
    if (missing_ok && st.st_size == 0) return false;
    raise(Errc::kInternal, "shm: peer segment {} has {} bytes, expected {}", name,
          static_cast<long long>(st.st_size), s.size_);
  }
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    raise_errno(err, "shm: cannot map peer segment {} ({} bytes)", name, s.size_);
  s.name_ = name;
  s.data_ = p;
  s.dev_ = st.st_dev;
  s.ino_ = st.st_ino;
  *out = std::move(s);
  return true;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    lock_fd_ = std::exchange(o.lock_fd_, -1);
    creator_ = std::exchange(o.creator_, 0);
    dev_ = std::exchange(o.dev_, 0);
    ino_ = std::exchange(o.ino_, 0);
  }
  return *this;
}

void Segment::unlink_if_same() const noexcept {
  struct stat st {};
  if (name_.empty() || stat(("/dev/shm" + name_).c_str(), &st) != 0) return;
  if (st.st_dev == dev_ && st.st_ino == ino_) shm_unlink(name_.c_str());
}

void Segment::unlink() noexcept {
  if (lock_fd_ < 0 || getpid() != creator_) return;
  // Name first, lock second: while the name exists, its creator's lock guards it.
  shm_unlink(name_.c_str());
  close(lock_fd_);
  lock_fd_ = -1;
}

void Segment::reset() noexcept {
  if (lock_fd_ >= 0 && getpid() != creator_) {
    // A fork child's copy of the fd: closing it leaves the lock with the creator's copy (flock
    // belongs to the open file description, held while any of its fds is open). Never LOCK_UN.
    close(lock_fd_);
    lock_fd_ = -1;
  }
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  creator_ = 0;
}

Segment::~Segment() {
  reset();
}

}  // namespace fluxcpp::shm
