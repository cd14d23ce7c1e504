#include "call_check.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace fluxcpp::backend {
namespace {

// One rank's spec as it travels: fixed fields, zero-padded, compared byte for byte.
struct Record {
  char name[40];
  char reduce[16];
  char dtype[24];
  int64_t count;
  int64_t parts;
  int64_t root;
  uint64_t call;  // the group's call number
  char pad[128 - 40 - 16 - 24 - 4 * 8];
};
static_assert(sizeof(Record) == 128, "a record is 64 bf16 units");
constexpr int64_t kUnits = sizeof(Record) / 2;
// The data's room per rank, in bf16 units: a size class, so that ranks making the same call
// gather the same rows.
// Powers of two from 1 KiB to the largest room (`max` bytes): at most twice the data travels
// (what a class pads costs wire time across hosts). Coarse (1 KiB, 16 KiB, then powers of two
// from 64 KiB, the largest room last): for calls whose ranks may pass different sizes
// (all_to_all's splits), so that near sizes share a class more often.
int64_t carry_units(int64_t bytes, bool coarse, int64_t max) {
  if (bytes <= 0) return 0;
  int64_t room = 1024;
  if (coarse && bytes > room) room = bytes <= (16 << 10) ? 16 << 10 : 64 << 10;
  while (room < bytes && room < max) room *= 2;
  return std::min(room, max) / 2;
}

template <std::size_t N>
void put(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(s.size(), N - 1));
}

template <std::size_t N>
std::string get(const char (&src)[N]) {
  return std::string(src, strnlen(src, N));
}

CallSpec spec_of(const Record& r) {
  CallSpec s;
  s.name = get(r.name);
  s.reduce = get(r.reduce);
  s.dtype = get(r.dtype);
  s.count = r.count;
  s.parts = r.parts;
  s.root = static_cast<int>(r.root);
  return s;
}

}  // namespace

std::string CallSpec::words() const {
  std::string args;
  auto add = [&](const std::string& a) { args += (args.empty() ? "" : ", ") + a; };
  if (!reduce.empty()) add(reduce);
  if (root >= 0) add("root " + std::to_string(root));
  if (!dtype.empty()) add(dtype);
  if (parts >= 0) add(std::to_string(parts) + (parts == 1 ? " tensor" : " tensors"));
  if (count >= 0) add(std::to_string(count) + (count == 1 ? " element" : " elements"));
  return name + "(" + args + ")";
}

// Every rank computes the same room: a store-made context (the backend's) has hosts of equal
// sizes (context_store.cpp makes ranks spread unevenly hosts of one rank each), so host_size
// is 1 on every rank or on none.
CallCheck::CallCheck(fluxcpp_context_t ctx, int rank, int size)
    : ctx_(ctx), rank_(rank), size_(size) {
  int host_size = 0;
  check(fluxcpp_context_info(ctx, nullptr, nullptr, nullptr, &host_size), "context info");
  if (host_size == 1 && size > 1) {
    const int64_t per_rank = ((int64_t{256} << 10) / (size - 1)) / 128 * 128;
    carry_max_ = std::clamp(per_rank - static_cast<int64_t>(sizeof(Record)), kCarryBytes,
                            kHostsCarryBytes);
  }
}

CallCheck::~CallCheck() {
  if (op_ != nullptr) fluxcpp_all_gather_destroy(op_);
}

void CallCheck::agree(const CallSpec& spec) { agree_carrying(spec, nullptr, 0, false); }

// Every rank holds the same records (`block` bytes apart): the same verdict everywhere. Named:
// the first rank whose call differs from rank 0's.
void CallCheck::compare(const char* all, std::size_t block) const {
  auto record = [&](int r) { return reinterpret_cast<const Record*>(all + block * r); };
  for (int r = 1; r < size_; ++r) {
    if (std::memcmp(record(r), record(0), sizeof(Record)) == 0) continue;
    std::string msg = "fluxcpp backend: the ranks' calls disagree (call " +
                      std::to_string(record(0)->call) + " of the group";
    if (record(r)->call != record(0)->call)
      msg += "; rank " + std::to_string(r) + " counts it as call " +
             std::to_string(record(r)->call);
    msg += "): rank 0 called " + spec_of(*record(0)).words() + ", rank " + std::to_string(r) +
           " called " + spec_of(*record(r)).words() +
           "; every rank must make the same calls in the same order. Nothing was sent; the "
           "group stays usable.";
    throw Failure(FLUXCPP_ERROR_INVALID_ARGUMENT, msg);
  }
}

const std::vector<const char*>& CallCheck::agree_carrying(const CallSpec& spec, const void* data,
                                                          int64_t bytes, bool coarse) {
  if (bytes > carry_max_)
    throw Failure(FLUXCPP_ERROR_INTERNAL, "fluxcpp backend: " + spec.name + " carries " +
                                              std::to_string(bytes) + " bytes, more than " +
                                              std::to_string(carry_max_));
  blocks_.assign(static_cast<std::size_t>(size_), nullptr);
  if (size_ == 1) {
    blocks_[0] = static_cast<const char*>(data);
    return blocks_;
  }
  if (op_ == nullptr) {  // rows of one unit: a call gathers (record + its size class) per rank
    const int64_t rows = size_ * (kUnits + carry_units(carry_max_, false, carry_max_));
    check(fluxcpp_all_gather_create(ctx_, rows, 1, FLUXCPP_BFLOAT16, &op_), "call check create");
  }
  const int64_t units = kUnits + carry_units(bytes, coarse, carry_max_);
  const std::size_t block = static_cast<std::size_t>(units) * 2;
  mine_.resize(block);  // the record zero-padded, the data, then zeros (not last call's bytes)
  std::memset(mine_.data(), 0, sizeof(Record));
  std::memset(mine_.data() + sizeof(Record) + std::max<int64_t>(bytes, 0), 0,
              block - sizeof(Record) - static_cast<std::size_t>(std::max<int64_t>(bytes, 0)));
  Record& mine = *reinterpret_cast<Record*>(mine_.data());
  put(mine.name, spec.name);
  put(mine.reduce, spec.reduce);
  put(mine.dtype, spec.dtype);
  mine.count = spec.count;
  mine.parts = spec.parts;
  mine.root = spec.root;
  mine.call = calls_++;
  if (bytes > 0) std::memcpy(mine_.data() + sizeof(Record), data, static_cast<std::size_t>(bytes));
  all_.resize(block * static_cast<std::size_t>(size_));
  const fluxcpp_status_t st = fluxcpp_all_gather_forward(op_, mine_.data(), size_ * units,
                                                         all_.data());
  if (st == FLUXCPP_ERROR_INVALID_ARGUMENT) {
    // The rows differ (data of another size class; the gather says so on every rank): the
    // records alone, gathered once more, name the calls.
    check(fluxcpp_all_gather_forward(op_, mine_.data(), size_ * kUnits, all_.data()),
          spec.name.c_str());
    compare(all_.data(), sizeof(Record));
    blocks_.clear();  // the same call everywhere, its data too large on some rank
    return blocks_;
  }
  check(st, spec.name.c_str());
  compare(all_.data(), block);
  for (int r = 0; r < size_; ++r) blocks_[r] = all_.data() + block * r + sizeof(Record);
  return blocks_;
}

}  // namespace fluxcpp::backend
