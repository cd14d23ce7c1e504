// The id an MPI-free context is created from (NCCL's unique id): made by one rank, carried to
// the others by the caller, the same 128 bytes on every rank. It names the rendezvous segment
// (128 random bits: nobody can derive it from anything else) and the machine it was made on, and
// carries the job's secret (128 more random bits, in no name: what a rank checks the rendezvous
// segment by) and a checksum.
#pragma once

#include <cstddef>
#include <string>

namespace fluxcpp::comm {

inline constexpr std::size_t kUniqueIdBytes = 128;
inline constexpr std::size_t kIdSecretBytes = 16;

// Fills `out` with a fresh id. kSystem when no random bits can be had.
void make_unique_id(char (&out)[kUniqueIdBytes]);

struct ParsedId {
  std::string segment;  // "/fluxcpp-boot-<32 hex>"
  std::string boot_id;  // the kernel's boot id of the machine that made it
  std::string host;     // its host name (for messages)
  std::string secret;   // kIdSecretBytes bytes in no name: the rendezvous must carry them
};
// kInvalidArgument when `id` is not one make_unique_id made (by this library's version), or its
// checksum does not match (a corrupted id).
ParsedId parse_unique_id(const char (&id)[kUniqueIdBytes]);

// This machine's boot id ("" if unknown) and host name.
std::string this_boot_id();
std::string this_host_name();

}  // namespace fluxcpp::comm
