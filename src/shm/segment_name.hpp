// Segment names: "/fluxcpp-<creator pid>-<tag>-<32 hex digits>". The hex digits are 128 bits
// from the kernel's CSPRNG (getrandom), fresh for every segment, so no name can be derived from
// another one, from the pids or from the tags: another local user cannot create a job's names
// before it (the "fluxcpp-<pid>-" prefix only says who created the segment, for people and for
// the tests' leftover checks; nothing trusts it).
#pragma once

#include <cstddef>
#include <string>

namespace fluxcpp::shm {

// Every fluxcpp segment's entry in /dev/shm starts with this.
inline constexpr const char kSegmentPrefix[] = "fluxcpp-";
// Random bytes in every name (128 bits).
inline constexpr std::size_t kNameRandomBytes = 16;

// A fresh name for a segment of `tag` (letters, digits, '_', '.'; kInternal otherwise). kSystem
// when no random bits can be had.
std::string unique_segment_name(const std::string& tag);

// Fills buf with n random bytes; throws (kSystem) when it cannot.
using RandomSource = void (*)(unsigned char* buf, std::size_t n);
// Test seam: replaces the source of the names' random bits (nullptr: getrandom again) and returns
// the previous one (nullptr when it was getrandom).
RandomSource set_random_for_testing(RandomSource source) noexcept;

// True when `name` ("/fluxcpp-...") refers, right now, to the file open as `fd` (same device and
// inode): false once the name was removed, or removed and created again.
bool name_refers_to(const std::string& name, int fd) noexcept;

}  // namespace fluxcpp::shm
