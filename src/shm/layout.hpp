// Named regions of an op's symmetric segment. An op declares its arrays of signals and data slots
// by name before the segment exists ("staged[1]", "landed[hosts]", "done[L]"); once the segment
// is allocated and bound, a handle turns (owner, index) into an address, and a signal's name
// into the text a timeout reports. No op computes byte offsets into a segment; indices within an
// array are the op's (AsyncSendRecv indexes its per-pair slot rings as pair * num_slots + slot).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "shm/signal.hpp"

namespace fluxcpp::shm {

class SymmetricBuffer;

namespace detail {
// Base address of every host rank's segment; filled by Layout::bind.
struct LayoutBases {
  std::vector<char*> base;
  std::size_t bytes = 0;
};
}  // namespace detail

// `count` signals on their own cache lines, in every host rank's segment.
class SignalArray {
 public:
  SignalArray() = default;
  // Signal i of the array in host rank `owner`'s segment.
  Signal& at(int owner, int i = 0) const;
  int count() const { return count_; }
  // "name[i]", for error messages.
  std::string label(int i) const;

 private:
  friend class Layout;
  std::shared_ptr<const detail::LayoutBases> bases_;
  std::string name_;
  std::size_t offset_ = 0;
  int count_ = 0;
};

// `count` data slots of `bytes` each (page aligned), in every host rank's segment.
class SlotArray {
 public:
  SlotArray() = default;
  char* at(int owner, int i = 0) const;
  int count() const { return count_; }
  std::size_t bytes() const { return bytes_; }

 private:
  friend class Layout;
  std::shared_ptr<const detail::LayoutBases> bases_;
  std::size_t offset_ = 0, bytes_ = 0, stride_ = 0;
  int count_ = 0;
};

class Layout {
 public:
  Layout() : bases_(std::make_shared<detail::LayoutBases>()) {}
  // Declarations (before bind). Zero counts and sizes are allowed: the region is then empty. A
  // signal keeps its name for the text a timeout reports; a slot's name only labels the
  // declaration (no wait is on a slot).
  SignalArray signals(std::string name, int count);
  SlotArray slots(std::string name, int count, std::size_t bytes);
  // Bytes a segment needs for everything declared so far.
  std::size_t bytes() const { return end_; }
  // Resolves every handle against the buffer's segments (one per host rank).
  void bind(const SymmetricBuffer& buffer);
  // True if [p, p + n) overlaps any host rank's segment.
  bool overlaps(const void* p, std::size_t n) const;

 private:
  std::size_t place(std::size_t bytes, std::size_t align);
  std::shared_ptr<detail::LayoutBases> bases_;
  std::size_t end_ = 0;
};

}  // namespace fluxcpp::shm
