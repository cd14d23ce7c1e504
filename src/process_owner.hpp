// The process an object was made in. After fork() the child holds copies of fluxcpp's objects:
// their memory and shared-memory mappings are copied, their threads, MPI state and the locks
// those threads held are not. A copy is never used (every entry point refuses it, naming both
// processes) and, when dropped, releases only what is the child's own (its copies of the
// mappings): it joins no thread, frees no MPI object, removes no name and signals no peer.
#pragma once

#include <sys/types.h>
#include <unistd.h>

namespace fluxcpp {

// This process's pid without a system call: read once, and again in the child of every fork()
// (a pthread_atfork handler), since every op call asks (getpid() cost ~10 % of a small call).
pid_t current_pid() noexcept;

class ProcessOwner {
 public:
  // True in the process that made the object.
  bool here() const noexcept { return current_pid() == pid_; }
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = current_pid();
};

}  // namespace fluxcpp
