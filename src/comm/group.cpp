#include "comm/group.hpp"

#include <algorithm>
#include <new>

#include "error_util.hpp"

namespace fluxcpp::comm {

Caught run_caught(const std::function<void()>& fn, int rank) {
  try {
    fn();
  } catch (const Error& e) {
    return {static_cast<int>(e.code()), e.what()};
  } catch (const std::bad_alloc&) {
    // Allocations that know what they are for raise their own message (resize_or_raise).
    return {static_cast<int>(Errc::kSystem), fmt::format("out of memory (rank {})", rank)};
  } catch (const std::exception& e) {
    return {static_cast<int>(Errc::kInternal), e.what()};
  } catch (...) {
    return {static_cast<int>(Errc::kInternal), "unknown exception"};
  }
  return {};
}

void throw_agreed(int code, const std::string& text, int first, int rank) {
  if (rank == first) throw AgreedError(static_cast<Errc>(code), text);
  throw AgreedError(static_cast<Errc>(code), fmt::format("{} (reported by rank {})", text, first));
}

void Group::agree(const std::function<void()>& fn) {
  const int me = rank(), n = size();
  const Caught mine = run_caught(fn, me);
  struct Head {
    long long code, len;
  };
  const Head head{mine.code, static_cast<long long>(mine.message.size())};
  std::vector<Head> heads(static_cast<std::size_t>(n));
  allgather(&head, heads.data(), sizeof(Head));
  int first = 0;
  while (first < n && heads[first].code == 0) ++first;
  if (first == n) return;
  // Only the first failing rank's text crosses: every rank sends that many bytes.
  const std::size_t len = static_cast<std::size_t>(heads[first].len);
  std::string out(len, '\0'), all(len * static_cast<std::size_t>(n), '\0');
  if (me == first) out = mine.message;
  allgather(out.data(), all.data(), len);
  throw_agreed(static_cast<int>(heads[first].code), all.substr(len * first, len), first, me);
}

void Group::agree_values(const char* op, const char* const* names, const long long* values, int n) {
  if (n <= 0) return;
  const int w = size();
  std::vector<long long> all(static_cast<std::size_t>(n) * w);
  allgather(values, all.data(), sizeof(long long) * n);
  for (int i = 0; i < n; ++i) {
    int lo = 0, hi = 0;  // the lowest ranks holding the extremes
    for (int r = 1; r < w; ++r) {
      if (all[r * n + i] < all[lo * n + i]) lo = r;
      if (all[r * n + i] > all[hi * n + i]) hi = r;
    }
    if (all[lo * n + i] == all[hi * n + i]) continue;
    throw AgreedError(Errc::kInvalidArgument,
                      fmt::format("{}: ranks disagree on {}: rank {} passed {}, rank {} passed {}",
                                  op, names[i], lo, all[lo * n + i], hi, all[hi * n + i]));
  }
}

void agree_choice(Group& g, const char* op, const char* name, int value, const char* const* names,
                  int n) {
  std::vector<long long> all(static_cast<std::size_t>(g.size()));
  const long long mine = value;
  g.allgather(&mine, all.data(), sizeof mine);
  const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
  if (*lo == *hi) return;
  auto label = [&](long long v) {
    return v >= 0 && v < n ? std::string(names[v]) : fmt::format("value {}", v);
  };
  throw AgreedError(Errc::kInvalidArgument,
                    fmt::format("{}: ranks disagree on {}: rank {} has {}, rank {} has {}", op,
                                name, lo - all.begin(), label(*lo), hi - all.begin(), label(*hi)));
}

long long max_value(Group& g, long long value) {
  std::vector<long long> all(static_cast<std::size_t>(g.size()));
  g.allgather(&value, all.data(), sizeof value);
  return *std::max_element(all.begin(), all.end());
}

std::vector<std::string> allgather_strings(Group& g, const std::string& mine) {
  const auto maxlen = static_cast<std::size_t>(max_value(g, static_cast<long long>(mine.size())));
  const int n = g.size();
  std::string buf;
  // Agreed: a rank that cannot allocate must not leave its peers inside the allgather.
  g.agree([&] {
    resize_or_raise(buf, maxlen * static_cast<std::size_t>(n), "context",
                    "the host's allgather buffer");
  });
  std::string padded = mine;
  padded.resize(maxlen, '\0');
  g.allgather(padded.data(), buf.data(), maxlen);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string s = buf.substr(static_cast<std::size_t>(i) * maxlen, maxlen);
    s.resize(std::min(s.size(), s.find('\0')));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace fluxcpp::comm
