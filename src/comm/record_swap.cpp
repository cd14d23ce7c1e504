#include "comm/record_swap.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

namespace fluxcpp::comm {

namespace {
constexpr std::size_t kRecordLine = 64;
std::size_t round_to_line(std::size_t bytes) {
  return (bytes + kRecordLine - 1) / kRecordLine * kRecordLine;
}
}  // namespace

RecordSwap::Records::Records(std::size_t record, int members)
    : all_(record * static_cast<std::size_t>(members) + kRecordLine),
      outs_(record * static_cast<std::size_t>(members) + kRecordLine) {}

char* RecordSwap::Records::all() {
  return reinterpret_cast<char*>(round_to_line(reinterpret_cast<std::uintptr_t>(all_.data())));
}

char* RecordSwap::Records::outs() {
  return reinterpret_cast<char*>(round_to_line(reinterpret_cast<std::uintptr_t>(outs_.data())));
}

void RecordSwap::prepare(std::size_t bytes) {
  bytes = round_to_line(bytes);
  // A timed-out swap's orphans may still use the records: never reuse those.
  if (!records_ || records_.use_count() > 1 || bytes != bytes_) {
    records_ = std::make_shared<Records>(bytes, size_);
    bytes_ = bytes;
  }
}

char* RecordSwap::record(int member) const {
  return records_->all() + bytes_ * static_cast<std::size_t>(member);
}

char* RecordSwap::out_record(int member) const {
  return records_->outs() + bytes_ * static_cast<std::size_t>(member);
}

std::pair<const char*, std::size_t> RecordSwap::send_of(const Sends& sends, int m) const {
  if (sends.parted.empty()) return {record(rank_), std::min(sends.bytes, bytes_)};
  return {out_record(m), std::min(sends.parted[static_cast<std::size_t>(m)], bytes_)};
}

void RecordSwap::put_text(const std::string& mine, char* slot) {
  std::snprintf(slot, kText, "%s", mine.c_str());
}

std::vector<std::string> RecordSwap::texts_of(const char* slots) const {
  std::vector<std::string> out;
  for (int n = 0; n < size_; ++n) {
    const char* t = slots + static_cast<std::size_t>(kText) * n;
    out.emplace_back(t, strnlen(t, kText - 1));
  }
  return out;
}

}  // namespace fluxcpp::comm
