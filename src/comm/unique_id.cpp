#include "comm/unique_id.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include <cstring>
#include <fstream>

#include "error_util.hpp"
#include "shm/segment_name.hpp"

namespace fluxcpp::comm {

namespace {

// Layout: magic, the name's 16 random bytes, boot id (NUL-padded), host name (NUL-padded, for
// messages), the job's secret (16 random bytes that are in no name: the rendezvous segment must
// carry them), and a checksum of everything before it (FNV-1a, 64 bits, little endian).
constexpr char kMagic[8] = {'f', 'l', 'u', 'x', 'i', 'd', '0', '2'};
constexpr std::size_t kRandomAt = 8, kBootAt = 24, kBootBytes = 40, kHostAt = 64, kHostBytes = 40;
constexpr std::size_t kSecretAt = 104, kSumAt = 120;
static_assert(kHostAt + kHostBytes == kSecretAt && kSecretAt + kIdSecretBytes == kSumAt);
static_assert(kSumAt + 8 == kUniqueIdBytes);
static_assert(kRandomAt + shm::kNameRandomBytes <= kBootAt);

std::string field(const char* p, std::size_t n) {
  return std::string(p, strnlen(p, n));
}

uint64_t checksum(const char* p, std::size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ull;
  return h;
}

void put_sum(char* out, uint64_t h) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h >> (8 * i)) & 0xFF);
}

uint64_t get_sum(const char* in) {
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i)
    h |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return h;
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
  const std::string boot = this_boot_id(), host = this_host_name().substr(0, kHostBytes - 1);
  std::memcpy(out + kBootAt, boot.data(), boot.size());
  std::memcpy(out + kHostAt, host.data(), host.size());
  unsigned char secret[kIdSecretBytes];
  std::size_t got = 0;
  while (got < sizeof secret) {
    const ssize_t n = getrandom(secret + got, sizeof secret - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) raise_errno(errno, "context: no random bits for the id's secret (getrandom)");
    got += static_cast<std::size_t>(n);
  }
  std::memcpy(out + kSecretAt, secret, sizeof secret);
  put_sum(out + kSumAt, checksum(out, kSumAt));
}

ParsedId parse_unique_id(const char (&id)[kUniqueIdBytes]) {
  if (std::memcmp(id, kMagic, sizeof kMagic) != 0)
    raise(Errc::kInvalidArgument,
          "context: the id is not one fluxcpp_get_unique_id made (pass the 128 bytes it wrote, "
          "unchanged, to every rank)");
  if (get_sum(id + kSumAt) != checksum(id, kSumAt))
    raise(Errc::kInvalidArgument,
          "context: the id is corrupted (its checksum does not match its bytes): pass the 128 "
          "bytes fluxcpp_get_unique_id wrote, unchanged, to every rank");
  ParsedId p;
  p.segment = "/" + std::string(shm::kSegmentPrefix) + "boot-";
  for (std::size_t i = 0; i < shm::kNameRandomBytes; ++i)
    p.segment += fmt::format("{:02x}", static_cast<unsigned char>(id[kRandomAt + i]));
  p.boot_id = field(id + kBootAt, kBootBytes);
  p.host = field(id + kHostAt, kHostBytes);
  p.secret.assign(id + kSecretAt, kIdSecretBytes);
  return p;
}

}  // namespace fluxcpp::comm
