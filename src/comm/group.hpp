// The control plane of a context: the ranks that create and destroy ops together, and the
// bounded collectives they do it with (gather, agree on an error, agree on values, check in).
// Three kinds: MpiGroup over a communicator (comm/mpi_group.hpp), ShmGroup over one
// shared-memory segment for ranks on one host started without MPI (comm/shm_group.hpp),
// GlooGroup over the gloo channel (comm/gloo_group.hpp). Ops see only Group; which one a context
// has is decided once, when it is created. Every collective is bounded by the
// current DeadlineScope (comm/bounded.hpp) and raises kTimeout naming who did not take part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fluxcpp::comm {

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's `bytes` bytes of `mine`, in rank order, into `all` (size() * bytes). Every rank
  // passes the same `bytes`.
  virtual void allgather(const void* mine, void* all, std::size_t bytes) = 0;
  // Every rank passes `token` and sees everyone's: kTimeout naming the ranks (mapped through
  // `name_of`) that did not arrive, kInvalidUsage when a token differs (ranks are creating
  // different ops, or destroying while others create).
  virtual void check_in(uint64_t token, const char* step,
                        const std::function<int(int)>& name_of = {}) = 0;
  // Runs fn; if it throws on any rank, every rank throws an AgreedError with the code and
  // message of the lowest failing rank (other ranks' messages add "(reported by rank r)").
  // Doubles as a barrier.
  virtual void agree(const std::function<void()>& fn);
  // Every rank passes its n named values; if they differ, every rank throws kInvalidArgument
  // "<op>: ranks disagree on <name>: rank a passed x, rank b passed y" for the first such value.
  virtual void agree_values(const char* op, const char* const* names, const long long* values,
                            int n);
};

inline void agree(Group& g, const std::function<void()>& fn) {
  g.agree(fn);
}
inline void agree_value(Group& g, const char* op, const char* name, long long value) {
  g.agree_values(op, &name, &value, 1);
}
inline void agree_values(Group& g, const char* op, const char* const* names,
                         const long long* values, int n) {
  g.agree_values(op, names, values, n);
}
// agree_value for a setting with named values (value indexes names[0..n)): the error names them,
// "<op>: ranks disagree on <name>: rank a has x, rank b has y".
void agree_choice(Group& g, const char* op, const char* name, int value, const char* const* names,
                  int n);
// The largest of every rank's value.
long long max_value(Group& g, long long value);
// Every rank's string, in rank order.
std::vector<std::string> allgather_strings(Group& g, const std::string& mine);

// What agree's fn raised on this rank: {0, ""} when nothing; an Error's code and text; bad_alloc
// as kSystem "out of memory (rank r)"; anything else kInternal.
struct Caught {
  int code = 0;
  std::string message;
};
Caught run_caught(const std::function<void()>& fn, int rank);
// Throws the AgreedError every rank throws when rank `first` failed with (code, text).
[[noreturn]] void throw_agreed(int code, const std::string& text, int first, int rank);

}  // namespace fluxcpp::comm
