#include "comm/gloo_record_swap.hpp"

#include <gloo/transport/unbound_buffer.h>

#include <algorithm>

#include "comm/gloo_net.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

// Every member sends the first `send_bytes` of its record (all + bytes * me) to every other and
// receives theirs into all + bytes * member (a shorter message fills the record's start);
// returns the members whose part had not arrived when the channel failed or timed out. The
// buffers are kept for good after a failure (the closed channel's transfers are dropped, but
// nothing is left to chance).
std::vector<int> exchange(GlooNet& net, const std::vector<int>& members, int me, char* all,
                          std::size_t bytes, std::size_t send_bytes, uint64_t slot,
                          Deadline deadline, const std::string& what, std::string* error) {
  const int n = static_cast<int>(members.size());
  // One receive buffer per member (gloo reports only the latest completion's rank).
  std::vector<std::unique_ptr<GlooBuffer>> rx(static_cast<std::size_t>(n));
  std::unique_ptr<GlooBuffer> tx = net.buffer(all + bytes * me, send_bytes);
  std::vector<bool> got(static_cast<std::size_t>(n), false);
  got[me] = true;
  try {
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      rx[m] = net.buffer(all + bytes * m, bytes);
      net.recv(*rx[m], members[m], slot, 0, bytes);
    }
    for (int m = 0; m < n; ++m)
      if (m != me) net.send(*tx, members[m], slot, 0, send_bytes);
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      net.wait_recv(*rx[m], nullptr, deadline, what);
      got[m] = true;
    }
    for (int i = 1; i < n; ++i) net.wait_send(*tx, deadline, what);
  } catch (const Error& e) {
    *error = e.what();
    // The channel is closed (GlooNet::fail), but nothing is left to chance: the buffers stay,
    // and the caller keeps the memory they point at.
    for (auto& b : rx) (void)b.release();
    (void)tx.release();
    std::vector<int> late;
    for (int m = 0; m < n; ++m)
      if (!got[m]) late.push_back(m);
    if (late.empty()) throw;  // our sends failed: nothing to name
    return late;
  }
  return {};
}

}  // namespace

GlooRecordSwap::GlooRecordSwap(std::shared_ptr<GlooNet> net, std::vector<int> members, int me,
                               uint64_t serial, std::string what)
    : RecordSwap(std::move(what)),
      net_(std::move(net)),
      members_(std::move(members)),
      serial_(serial) {
  rank_ = me;
  size_ = static_cast<int>(members_.size());
}

std::vector<int> GlooRecordSwap::swap(std::size_t send_bytes, Deadline deadline,
                                      const BackoffPolicy& /*wait*/,
                                      std::array<int64_t, 2> /*retraction*/) {
  if (const std::string f = net_->failure(); !f.empty())
    raise(Errc::kInvalidUsage, "{}: the network channel failed earlier: {}", what_, f);
  std::string error;
  std::vector<int> late;
  try {
    late = exchange(*net_, members_, rank_, record(0), bytes_, std::min(send_bytes, bytes_),
                    GlooNet::op_slot(serial_, GlooNet::kRailSlot, 0), deadline, what_, &error);
  } catch (...) {
    (void)new std::shared_ptr<Records>(records_);  // see exchange()
    throw;
  }
  if (late.empty()) return late;
  (void)new std::shared_ptr<Records>(records_);       // see exchange()
  if (std::chrono::steady_clock::now() < deadline) {  // not late: gone (its connection closed)
    std::string names;
    for (int m : late) names += fmt::format("{}{}", names.empty() ? "" : ", ", members_[m]);
    raise(Errc::kTimeout, "{} (rank(s) {} on other hosts are gone)", error, names);
  }
  return late;
}

std::vector<std::string> GlooRecordSwap::gather_texts(const std::string& mine, Deadline deadline,
                                                      const BackoffPolicy& /*wait*/,
                                                      const std::function<std::string()>& missing) {
  std::vector<char> texts(static_cast<std::size_t>(kText) * size_, '\0');
  put_text(mine, &texts[static_cast<std::size_t>(kText) * rank_]);
  std::string error;
  std::vector<int> late;
  try {
    late = exchange(*net_, members_, rank_, texts.data(), kText, kText,
                    GlooNet::op_slot(serial_, GlooNet::kRailTextSlot, 0), deadline, what_, &error);
  } catch (...) {
    (void)new std::vector<char>(std::move(texts));  // see exchange()
    throw;
  }
  if (!late.empty()) {
    (void)new std::vector<char>(std::move(texts));
    raise(Errc::kTimeout, "{}", missing());
  }
  return texts_of(texts.data());
}

}  // namespace fluxcpp::comm
