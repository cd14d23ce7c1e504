#include "comm/gloo_record_swap.hpp"

#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "comm/gloo_net.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

// Every member sends send_of(m) to every other member m and receives theirs into all + bytes *
// member (a shorter message fills the record's start); returns the members whose part had not
// arrived when the channel failed or timed out. The buffers are kept for good after a failure
// (the closed channel's transfers are dropped, but nothing is left to chance).
using SendOf = std::function<std::pair<const char*, std::size_t>(int member)>;
std::vector<int> exchange(GlooNet& net, const std::vector<int>& members, int me, char* all,
                          std::size_t bytes, const SendOf& send_of, uint64_t slot,
                          Deadline deadline, const std::string& what, std::string* error) {
  const int n = static_cast<int>(members.size());
  // One receive buffer per member (gloo reports only the latest completion's rank), and one send
  // buffer per member (one buffer when every member gets the same bytes).
  std::vector<std::unique_ptr<GlooBuffer>> rx(static_cast<std::size_t>(n));
  std::vector<std::unique_ptr<GlooBuffer>> tx(static_cast<std::size_t>(n));
  std::vector<bool> got(static_cast<std::size_t>(n), false);
  got[me] = true;
  GlooBuffer* shared = nullptr;  // the buffer of the last member's bytes, when the same
  const char* shared_data = nullptr;
  try {
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      rx[m] = net.buffer(all + bytes * m, bytes);
      net.recv(*rx[m], members[m], slot, 0, bytes);
    }
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      const auto [data, len] = send_of(m);
      if (shared == nullptr || data != shared_data) {
        tx[m] = net.buffer(const_cast<char*>(data), len);
        shared = tx[m].get();
        shared_data = data;
      }
      net.send(*shared, members[m], slot, 0, len);
    }
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      net.wait_recv(*rx[m], nullptr, deadline, what);
      got[m] = true;
    }
    // A buffer's sends complete on it, in order: one wait per send on the buffer it was sent from.
    GlooBuffer* from = nullptr;
    for (int m = 0; m < n; ++m) {
      if (m == me) continue;
      if (tx[m]) from = tx[m].get();
      net.wait_send(*from, deadline, what);
    }
  } catch (const Error& e) {
    *error = e.what();
    // The channel is closed (GlooNet::fail), but nothing is left to chance: the buffers stay,
    // and the caller keeps the memory they point at.
    for (auto& b : rx) (void)b.release();
    for (auto& b : tx) (void)b.release();
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

std::vector<int> GlooRecordSwap::swap(const Sends& sends, Deadline deadline,
                                      const BackoffPolicy& /*wait*/,
                                      std::array<int64_t, 2> /*retraction*/) {
  if (const std::string f = net_->failure(); !f.empty())
    raise(Errc::kInvalidUsage, "{}: the network channel failed earlier: {}", what_, f);
  std::string error;
  std::vector<int> late;
  try {
    late = exchange(
        *net_, members_, rank_, record(0), bytes_, [&](int m) { return send_of(sends, m); },
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
    const char* own = &texts[static_cast<std::size_t>(kText) * rank_];
    late = exchange(
        *net_, members_, rank_, texts.data(), kText,
        [own](int) { return std::pair<const char*, std::size_t>(own, kText); },
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
