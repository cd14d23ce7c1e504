#include "shm/cma.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <cerrno>

#include "error_util.hpp"

namespace fluxcpp::shm {

void cma_read(pid_t pid, uint64_t remote, void* dst, std::size_t bytes) {
  auto* d = static_cast<char*>(dst);
  std::size_t done = 0;
  while (done < bytes) {
    iovec local{d + done, bytes - done};
    iovec rem{reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t n = process_vm_readv(pid, &local, 1, &rem, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      raise_errno(errno, "cma: reading {} bytes from process {} failed", bytes - done,
                  static_cast<long>(pid));
    }
    if (n == 0) raise(Errc::kSystem, "cma: process {} returned no data", static_cast<long>(pid));
    done += static_cast<std::size_t>(n);
  }
}

bool cma_probe(pid_t pid, uint64_t remote, uint64_t expected) noexcept {
  uint64_t got = ~expected;
  iovec local{&got, sizeof got};
  iovec rem{reinterpret_cast<void*>(remote), sizeof got};
  return process_vm_readv(pid, &local, 1, &rem, 1, 0) == static_cast<ssize_t>(sizeof got) &&
         got == expected;
}

void cma_allow_peers() noexcept {
#ifdef PR_SET_PTRACER
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
}

}  // namespace fluxcpp::shm
