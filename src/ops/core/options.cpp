#include "ops/core/options.hpp"

#include <utility>
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
                   std::vector<Field> fields, const std::function<void()>& extra) {
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

std::size_t agree_row_options(const comm::Parts& c, const char* op, const std::string& local_error,
                              DType dtype, const char* width_name, int64_t width,
                              const char* rows_name, int64_t rows, const std::vector<Field>& more,
                              const std::function<void()>& extra) {
  std::vector<Field> fields = {ops::dtype("dtype", dtype), dim(width_name, width),
                               count(rows_name, rows)};
  fields.insert(fields.end(), more.begin(), more.end());
  agree_options(c, op, local_error, std::move(fields), [&] {
    FLUXCPP_CHECK_ARG(rows <= (int64_t{1} << 40) / width, "{}: {}={} x {}={} is too large", op,
                      rows_name, rows, width_name, width);
    if (extra) extra();
  });
  return static_cast<std::size_t>(width) * dtype_size(dtype);
}

}  // namespace fluxcpp::ops
