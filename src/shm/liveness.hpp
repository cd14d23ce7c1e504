// The liveness lock, and the cleaner it makes safe. The process that creates a segment holds
// flock(LOCK_EX) on it for as long as the segment's name is linked (shm::Segment keeps that fd
// open, and removes the name before closing it), so a linked name whose lock nobody holds was
// left by a process that died between creating it and removing it. flock locks belong to the
// open file description, work on tmpfs and know nothing of PID namespaces: unlike kill(pid, 0)
// on the pid in the name, the test holds when the creator runs in another container sharing
// /dev/shm (docker --ipc=host, pods sharing IPC), whose pids mean nothing here. A second open of
// the file in the creator's own process, or in a fork child of it, conflicts too.
#pragma once

namespace fluxcpp::shm {

// The cleaner: for every /dev/shm entry starting "fluxcpp-" that this process can open (another
// user's is skipped), takes the liveness lock without waiting; if that succeeds — no live
// process holds it — and the name still refers to the file it opened, removes the name. Returns
// how many it removed. A live creator (running, or stopped by SIGSTOP: it still holds its lock)
// keeps its names. Never throws.
int remove_stale_segments() noexcept;

}  // namespace fluxcpp::shm
