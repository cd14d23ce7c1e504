#include "shm/segment.hpp"

#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <utility>

#include "error_util.hpp"
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

}  // namespace

std::string unique_segment_name(const std::string& tag) {
  unsigned long long rnd = 0;
  if (getrandom(&rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd))
    raise_errno(errno, "shm: getrandom");
  return fmt::format("/fluxcpp-{}-{}-{:016x}", static_cast<long>(getpid()), tag, rnd);
}

Segment Segment::create(const std::string& name, std::size_t bytes) {
  Segment s;
  s.size_ = page_round(bytes);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) raise_errno(errno, "shm: cannot create segment {} in /dev/shm", name);
  s.name_ = name;
  s.linked_ = true;
  // From here on the destructor removes the name on any error.
  if (ftruncate(fd, static_cast<off_t>(s.size_)) != 0) {
    int err = errno;
    close(fd);
    raise_errno(err, "shm: cannot size segment {} to {} bytes", name, s.size_);
  }
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    raise_errno(err, "shm: cannot map segment {} ({} bytes)", name, s.size_);
  }
  s.data_ = p;
  bind_local(p, s.size_);
  // Reserve every page now: tmpfs allocates lazily and would SIGBUS on first touch if full.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(s.size_));
  close(fd);
  if (rc == ENOSPC || rc == ENOMEM)
    raise(Errc::kSystem, "shm: /dev/shm is full: cannot reserve {} bytes for segment {} ({})",
          s.size_, name, shm_free_text());
  if (rc != 0) raise_errno(rc, "shm: cannot reserve {} bytes for segment {}", s.size_, name);
  return s;
}

Segment Segment::open(const std::string& name, std::size_t bytes) {
  Segment s;
  s.size_ = page_round(bytes);
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) raise_errno(errno, "shm: cannot open peer segment {}", name);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    raise_errno(err, "shm: cannot stat peer segment {}", name);
  }
  if (static_cast<std::size_t>(st.st_size) != s.size_) {
    close(fd);
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
  return s;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    linked_ = std::exchange(o.linked_, false);
  }
  return *this;
}

void Segment::unlink() noexcept {
  if (linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

void Segment::reset() noexcept {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Segment::~Segment() {
  reset();
}

}  // namespace fluxcpp::shm
