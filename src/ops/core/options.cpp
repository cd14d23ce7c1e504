#include "ops/core/options.hpp"

#include <vector>

#include "error_util.hpp"

namespace fluxcpp::ops {

namespace {

void check_field(const char* op, const Field& f, int rank) {
  switch (f.kind) {
    case Field::Kind::kAgreeOnly: return;
    case Field::Kind::kDType:
      FLUXCPP_CHECK_ARG(dtype_valid(static_cast<DType>(f.value)),
                        "{}: {}={} is not a valid fluxcpp dtype (rank {})", op, f.name, f.value,
                        rank);
      return;
    case Field::Kind::kRange:
      if (f.hi == LLONG_MAX)
        FLUXCPP_CHECK_ARG(f.value >= f.lo, "{}: {}={} must be >= {} (rank {})", op, f.name, f.value,
                          f.lo, rank);
      else
        FLUXCPP_CHECK_ARG(f.value >= f.lo && f.value <= f.hi,
                          "{}: {}={} must be in [{}, {}] (rank {})", op, f.name, f.value, f.lo,
                          f.hi, rank);
      return;
  }
}

}  // namespace

void agree_options(const comm::Parts& c, const char* op, const std::string& local_error,
                   std::initializer_list<Field> fields, const std::function<void()>& extra) {
  // close() is collective, so this local check gives the same answer on every rank.
  if (c.life().closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", op);
  const int r = c.topo().world_rank();
  comm::Group& comm = c.control();
  comm::agree(comm, [&] {
    if (!local_error.empty()) raise(Errc::kInvalidArgument, "{}: {} (rank {})", op, local_error, r);
    for (const Field& f : fields) check_field(op, f, r);
    if (extra) extra();
  });
  std::vector<const char*> names;
  std::vector<long long> values;
  for (const Field& f : fields) {
    names.push_back(f.name);
    values.push_back(f.value);
  }
  comm::agree_values(comm, op, names.data(), values.data(), static_cast<int>(values.size()));
}

}  // namespace fluxcpp::ops
