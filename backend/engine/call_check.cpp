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

CallCheck::~CallCheck() {
  if (op_ != nullptr) fluxcpp_all_gather_destroy(op_);
}

void CallCheck::agree(const CallSpec& spec) {
  if (size_ == 1) return;
  if (op_ == nullptr)
    check(fluxcpp_all_gather_create(ctx_, size_, kUnits, FLUXCPP_BFLOAT16, &op_),
          "call check create");
  Record mine{};
  put(mine.name, spec.name);
  put(mine.reduce, spec.reduce);
  put(mine.dtype, spec.dtype);
  mine.count = spec.count;
  mine.parts = spec.parts;
  mine.root = spec.root;
  mine.call = calls_++;
  std::vector<Record> all(static_cast<std::size_t>(size_));
  check(fluxcpp_all_gather_forward(op_, &mine, size_, all.data()), spec.name.c_str());
  // Every rank holds the same records: the same verdict everywhere. Named: the first rank whose
  // call differs from rank 0's.
  for (int r = 1; r < size_; ++r) {
    if (std::memcmp(&all[r], &all[0], sizeof(Record)) == 0) continue;
    std::string msg = "fluxcpp backend: the ranks' calls disagree (call " +
                      std::to_string(all[0].call) + " of the group";
    if (all[r].call != all[0].call)
      msg += "; rank " + std::to_string(r) + " counts it as call " + std::to_string(all[r].call);
    msg += "): rank 0 called " + spec_of(all[0]).words() + ", rank " + std::to_string(r) +
           " called " + spec_of(all[r]).words() +
           "; every rank must make the same calls in the same order. Nothing was sent; the "
           "group stays usable.";
    throw Failure(FLUXCPP_ERROR_INVALID_ARGUMENT, msg);
  }
}

}  // namespace fluxcpp::backend
