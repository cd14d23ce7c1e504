// An op's create options as one field list: each field names an option, carries this rank's value
// and says what it must be. agree_options checks every field (and the op's own checks) on every
// rank, raising the same Error everywhere, then agrees on all values in one reduction. An op's
// constructor states its options once, in the order its error messages name them.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp::ops {

struct Field {
  enum class Kind { kRange, kDType, kAgreeOnly };
  const char* name;
  long long value;
  Kind kind = Kind::kRange;
  long long lo = LLONG_MIN, hi = LLONG_MAX;
};

// A size that may be zero (max_m, max_tokens, ...): in [0, hi].
inline Field count(const char* name, long long v, long long hi = LLONG_MAX) {
  return {name, v, Field::Kind::kRange, 0, hi};
}
// A dimension (n, k, hidden, ...): in [1, hi].
inline Field dim(const char* name, long long v, long long hi = LLONG_MAX) {
  return {name, v, Field::Kind::kRange, 1, hi};
}
// One of the values 0..n-1 of an enum option.
inline Field choice(const char* name, long long v, long long n) {
  return {name, v, Field::Kind::kRange, 0, n - 1};
}
// A fluxcpp dtype.
inline Field dtype(const char* name, DType v) {
  return {name, static_cast<long long>(v), Field::Kind::kDType};
}
// Any value, as long as every rank passes the same (flags, values checked by the op itself).
inline Field same(const char* name, long long v) {
  return {name, v, Field::Kind::kAgreeOnly};
}

// Collective. A rank-local error (local_error, from the API layer's own checks) comes first, then
// each field's rule in list order ("<op>: <name>=<v> must be >= 1 (rank r)"), then `extra` (the
// op's own checks, which may rely on every field being in range); the first failure is raised as
// the same Error on every rank. Then every field must have the same value on every rank.
void agree_options(const comm::Parts& c, const char* op, const std::string& local_error,
                   std::vector<Field> fields, const std::function<void()>& extra = {});

// The options of an op over rows of `width` elements of one dtype (AllGather, ReduceScatter,
// AllToAllSingle, AsyncSendRecv): the fields "dtype", width_name (a dim), rows_name (a count),
// then `more`; before `extra`, the rule that rows x width stay within 2^40 elements
// ("<op>: max_m=<v> x n=<v> is too large"). Returns the bytes of one row.
std::size_t agree_row_options(const comm::Parts& c, const char* op, const std::string& local_error,
                              DType dtype, const char* width_name, int64_t width,
                              const char* rows_name, int64_t rows,
                              const std::vector<Field>& more = {},
                              const std::function<void()>& extra = {});

}  // namespace fluxcpp::ops
