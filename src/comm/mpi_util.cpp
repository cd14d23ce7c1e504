#include "comm/mpi_util.hpp"

#include <vector>

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
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (c_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&c_);
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
  int code = 0;
  std::string msg;
  try {
    fn();
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    msg = e.what();
  } catch (const std::exception& e) {
    code = static_cast<int>(Errc::kInternal);
    msg = e.what();
  } catch (...) {
    code = static_cast<int>(Errc::kInternal);
    msg = "unknown exception";
  }
  int first = code != 0 ? rank : size;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (first == size) return;
  long long hdr[2] = {code, static_cast<long long>(msg.size())};
  check_mpi(MPI_Bcast(hdr, 2, MPI_LONG_LONG, first, comm), "MPI_Bcast");
  std::string text(static_cast<std::size_t>(hdr[1]), '\0');
  if (rank == first) text = msg;
  if (!text.empty())
    check_mpi(MPI_Bcast(text.data(), static_cast<int>(hdr[1]), MPI_CHAR, first, comm), "MPI_Bcast");
  if (rank == first) throw Error(static_cast<Errc>(hdr[0]), text);
  throw Error(static_cast<Errc>(hdr[0]), fmt::format("{} (reported by rank {})", text, first));
}

void agree_value(MPI_Comm comm, const char* op, const char* name, long long value) {
  int size = 1;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  struct {
    long long v;
    int r;
  } lo{}, hi{};
  // MINLOC/MAXLOC on (value, rank) pairs need a long-int pair type; compare via two reductions.
  long long mm[2] = {value, -value};
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_LONG_LONG, MPI_MIN, comm), "MPI_Allreduce");
  if (mm[0] == -mm[1]) return;
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  int who[2] = {value == mm[0] ? rank : size, value == -mm[1] ? rank : size};
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, who, 2, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  lo = {mm[0], who[0]};
  hi = {-mm[1], who[1]};
  raise(Errc::kInvalidArgument, "{}: ranks disagree on {}: rank {} passed {}, rank {} passed {}",
        op, name, lo.r, lo.v, hi.r, hi.v);
}

}  // namespace fluxcpp::comm
