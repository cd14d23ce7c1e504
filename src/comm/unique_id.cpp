#include "comm/unique_id.hpp"

#include <unistd.h>

#include <cstring>
#include <fstream>

#include "error_util.hpp"
#include "shm/segment_name.hpp"

namespace fluxcpp::comm {

namespace {

// Layout: magic, 16 random bytes, boot id (NUL-padded), host name (NUL-padded).
constexpr char kMagic[8] = {'f', 'l', 'u', 'x', 'i', 'd', '0', '1'};
constexpr std::size_t kRandomAt = 8, kBootAt = 24, kBootBytes = 40, kHostAt = 64, kHostBytes = 64;
static_assert(kHostAt + kHostBytes == kUniqueIdBytes);
static_assert(kRandomAt + shm::kNameRandomBytes <= kBootAt);

std::string field(const char* p, std::size_t n) {
  return std::string(p, strnlen(p, n));
}

}  // namespace

std::string this_boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(f, s);
  return s.substr(0, kBootBytes - 1);
}

std::string this_host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return std::string(buf).substr(0, kHostBytes - 1);
}

void make_unique_id(char (&out)[kUniqueIdBytes]) {
  std::memset(out, 0, kUniqueIdBytes);
  std::memcpy(out, kMagic, sizeof kMagic);
  // The same source as every segment name's random bits (and its test seam).
  const std::string name = shm::unique_segment_name("boot");
  // "/fluxcpp-<pid>-boot-<32 hex>": keep the hex, the part nobody can guess.
  const std::string hex = name.substr(name.size() - 2 * shm::kNameRandomBytes);
  for (std::size_t i = 0; i < shm::kNameRandomBytes; ++i)
    out[kRandomAt + i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  const std::string boot = this_boot_id(), host = this_host_name();
  std::memcpy(out + kBootAt, boot.data(), boot.size());
  std::memcpy(out + kHostAt, host.data(), host.size());
}

ParsedId parse_unique_id(const char (&id)[kUniqueIdBytes]) {
  if (std::memcmp(id, kMagic, sizeof kMagic) != 0)
    raise(Errc::kInvalidArgument,
          "context: the id is not one fluxcpp_get_unique_id made (pass the 128 bytes it wrote, "
          "unchanged, to every rank)");
  ParsedId p;
  p.segment = "/" + std::string(shm::kSegmentPrefix) + "boot-";
  for (std::size_t i = 0; i < shm::kNameRandomBytes; ++i)
    p.segment += fmt::format("{:02x}", static_cast<unsigned char>(id[kRandomAt + i]));
  p.boot_id = field(id + kBootAt, kBootBytes);
  p.host = field(id + kHostAt, kHostBytes);
  return p;
}

}  // namespace fluxcpp::comm
