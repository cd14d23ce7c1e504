// A rank is SIGKILLed between two calls. The survivors must fail with kTimeout naming it within
// timeout_s plus a little, and leave nothing in /dev/shm. Run by killed_rank.cmake under mpirun
// with orte_abort_on_non_zero_status=0, so the survivors outlive the dead rank. Survivors print
// "killed_rank: rank R PASS|FAIL ..." and leave without MPI_Finalize (a peer is dead).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"

int main(int argc, char** argv) {
  int provided = 0, rank = 0, world = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::printf("killed_rank: pid %ld\n", static_cast<long>(getpid()));
  std::fflush(stdout);
  const double timeout = 2.0;
  const int victim = world - 1;
  fluxcpp::ContextOptions o;
  o.timeout_s = timeout;
  fluxcpp::Context ctx(MPI_COMM_WORLD, o);
  fluxcpp::AllGather ag(ctx, {64 * world, 100, fluxcpp::DType::kFloat32});
  std::vector<float> in(64 * 100, 1.0f), out(64 * 100 * world);
  ag.forward(in.data(), 64 * world, out.data());
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == victim) raise(SIGKILL);

  std::string verdict = "FAIL no error";
  auto t0 = std::chrono::steady_clock::now();
  try {
    ag.forward(in.data(), 64 * world, out.data());
  } catch (const fluxcpp::Error& e) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string what = e.what();
    bool named = what.find("rank " + std::to_string(victim)) != std::string::npos;
    bool ok = e.code() == fluxcpp::Errc::kTimeout && named && secs < timeout + 3.0;
    verdict = (ok ? "PASS " : "FAIL ") + std::to_string(secs) + " s: " + what;
  }
  std::printf("killed_rank: rank %d %s\n", rank, verdict.c_str());
  std::fflush(stdout);
  _exit(0);
}
