// A POSIX shared-memory segment mapped into this process (RAII).
#pragma once

#include <cstddef>
#include <string>

namespace fluxcpp::shm {

class Segment {
 public:
  Segment() = default;
  // Creates a new segment: O_CREAT|O_EXCL, mode 0600; reserves all of `bytes` up front
  // (posix_fallocate), so a full /dev/shm is an Error naming its free space rather than a SIGBUS
  // on first touch; binds the pages to the caller's NUMA node; maps it read-write.
  static Segment create(const std::string& name, std::size_t bytes);
  // Maps a segment a peer created; its size must be `bytes`.
  static Segment open(const std::string& name, std::size_t bytes);

  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();  // unmaps; removes the name if this process created it and it is still linked

  // Removes the name; the memory stays mapped by everyone who mapped it. Idempotent.
  void unlink() noexcept;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void reset() noexcept;
  std::string name_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool linked_ = false;  // we created the name and have not removed it yet
};

// A name no other job can guess: "/fluxcpp-<pid>-<tag>-<64 random bits>".
std::string unique_segment_name(const std::string& tag);

}  // namespace fluxcpp::shm
