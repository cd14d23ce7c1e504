// A POSIX shared-memory segment mapped into this process (RAII).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "shm/segment_name.hpp"

namespace fluxcpp::shm {

class Segment {
 public:
  Segment() = default;
  // Creates a new segment for `tag` under a fresh name (unique_segment_name): shm_open
  // O_CREAT|O_EXCL, mode 0600, then the liveness lock (flock LOCK_EX, held on an fd kept open
  // for as long as the name is linked: shm/liveness.hpp) and a check that the name still refers
  // to the file just made (a cleaner may have removed it in between). A name that exists already
  // (EEXIST), or was lost to a cleaner, is retried with fresh bits up to kCreateAttempts times,
  // then kSystem. Reserves all of `bytes` up front (posix_fallocate), so a full /dev/shm is an
  // Error naming its free space rather than a SIGBUS on first touch; binds the pages to the
  // caller's NUMA node; maps it read-write.
  static Segment create(const std::string& tag, std::size_t bytes);
  // Creates the segment `name` ("/fluxcpp-..."), locked as create() does (retried while a
  // cleaner races it); kInvalidUsage when the name exists already (another process is using it).
  static Segment create_named(const std::string& name, std::size_t bytes);
  // Maps a segment a peer created; its size must be `bytes`.
  static Segment open(const std::string& name, std::size_t bytes);
  // open(), but false (and *out untouched) while the name does not exist yet or its creator has
  // not sized it yet: for a rendezvous whose creator may come later. bytes = 0: any size.
  static bool try_open(const std::string& name, std::size_t bytes, Segment* out);

  static constexpr int kCreateAttempts = 16;

  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  // Unmaps. In the process that created the segment, also removes the name if it is still
  // linked (and so releases the lock). In any other process (a fork child holding a copy), only
  // closes that process's copy of the lock fd: the creator's name and lock are left alone.
  ~Segment();

  // Removes the name and releases the liveness lock; the memory stays mapped by everyone who
  // mapped it. Idempotent; does nothing outside the creating process.
  void unlink() noexcept;

  // Removes the name if it still names this very segment (same device and inode), whoever
  // created it: a rank that mapped the segment can remove its name without ever removing a
  // newer segment made under the same name.
  void unlink_if_same() const noexcept;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // True while this process created the name and has not removed it yet.
  bool linked() const { return lock_fd_ >= 0; }

 private:
  static Segment adopt_created(int fd, std::string name, std::size_t bytes);
  static bool open_sized(const std::string& name, std::size_t bytes, bool missing_ok, Segment* out);
  void reset() noexcept;
  std::string name_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  int lock_fd_ = -1;   // open, holding flock(LOCK_EX), while the name we created is linked
  pid_t creator_ = 0;  // the process that created the segment (0: opened, not created)
  dev_t dev_ = 0;      // the file's identity, for unlink_if_same
  ino_t ino_ = 0;
};

}  // namespace fluxcpp::shm
