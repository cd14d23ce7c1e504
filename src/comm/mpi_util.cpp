#include "comm/mpi_util.hpp"

#include <new>
#include <vector>

#include "comm/bounded.hpp"
#include "comm/group.hpp"
#include "comm/orphans.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

UniqueComm& UniqueComm::operator=(UniqueComm&& o) noexcept {
  if (this != &o) {
    UniqueComm tmp(std::move(*this));
    c_ = o.c_;
    o.c_ = MPI_COMM_NULL;
  }
  return *this;
}

UniqueComm::~UniqueComm() {
  if (creator_.here()) free_comm(&c_);  // not in a copy made by fork(): see process_owner.hpp
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
  raise(Errc::kMpi, "{} failed: {}", what, std::string(buf, static_cast<std::size_t>(len)));
}

void agree(MPI_Comm comm, const std::function<void()>& fn) {
  int rank = 0, size = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const Caught mine = run_caught(fn, rank);
  const int code = mine.code;
  const std::string& msg = mine.message;
  int first = code != 0 ? rank : size;
  allreduce(&first, 1, MPI_INT, MPI_MIN, comm);
  if (first == size) return;
  long long hdr[2] = {code, static_cast<long long>(msg.size())};
  bcast(hdr, 2, MPI_LONG_LONG, first, comm);
  std::string text(static_cast<std::size_t>(hdr[1]), '\0');
  if (rank == first) text = msg;
  if (!text.empty()) bcast(text.data(), static_cast<int>(hdr[1]), MPI_CHAR, first, comm);
  throw_agreed(static_cast<int>(hdr[0]), text, first, rank);
}

void agree_value(MPI_Comm comm, const char* op, const char* name, long long value) {
  agree_values(comm, op, &name, &value, 1);
}

void agree_values(MPI_Comm comm, const char* op, const char* const* names, const long long* values,
                  int n) {
  if (n <= 0) return;
  int size = 1;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  // One reduction finds both extremes of every value: min(~v) = ~max(v), and ~ (unlike -) is
  // defined for every value, LLONG_MIN included.
  std::vector<long long> mm(2 * static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    mm[2 * i] = values[i];
    mm[2 * i + 1] = ~values[i];
  }
  allreduce(mm.data(), 2 * n, MPI_LONG_LONG, MPI_MIN, comm);
  for (int i = 0; i < n; ++i) {
    const long long lo = mm[2 * i], hi = ~mm[2 * i + 1];
    if (lo == hi) continue;
    // Every rank sees the same extremes, so every rank stops at the same i.
    int rank = 0;
    check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    int who[2] = {values[i] == lo ? rank : size, values[i] == hi ? rank : size};
    allreduce(who, 2, MPI_INT, MPI_MIN, comm);
    throw AgreedError(Errc::kInvalidArgument,
                      fmt::format("{}: ranks disagree on {}: rank {} passed {}, rank {} passed {}",
                                  op, names[i], who[0], lo, who[1], hi));
  }
}

}  // namespace fluxcpp::comm
