// The bench's context over the TCP channel: FLUXCPP_BENCH_CHANNEL=gloo makes it from a store (a
// directory every rank sees: the ranks share this machine's file system) instead of from
// MPI_COMM_WORLD, so the fused ops run over gloo's TCP transport while the unfused references
// still run on MPI. Hosts are simulated as FLUXCPP_BENCH_RANKS_PER_NODE ranks each
// (FLUXCPP_HOST_ID), on the loopback unless FLUXCPP_SOCKET_IFNAME says otherwise.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench.hpp"
#include "fluxcpp/error.hpp"

namespace fluxcpp::bench {

namespace {

std::string file_of(const std::string& dir, std::string key) {
  for (char& c : key)
    if (c == '/') c = '_';
  return dir + "/" + key;
}

}  // namespace

bool store_channel() {
  const char* c = std::getenv("FLUXCPP_BENCH_CHANNEL");
  return c != nullptr && std::string(c) == "gloo";
}

Context store_context(int rank, int size) {
  int rpn = 1;
  if (const char* r = std::getenv("FLUXCPP_BENCH_RANKS_PER_NODE"); r && std::atoi(r) > 0)
    rpn = std::atoi(r);
  setenv("FLUXCPP_HOST_ID", fmt::format("bench-host-{}", rank / rpn).c_str(), 1);
  setenv("FLUXCPP_SOCKET_IFNAME", "lo", 0);
  // Rank 0 names a fresh directory; everybody learns it over MPI (the launcher's channel).
  char dir[256] = {};
  if (rank == 0) {
    std::string tmpl = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                       "/fluxcpp_bench_store_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw Error(Errc::kSystem, "bench: mkdtemp failed");
    std::snprintf(dir, sizeof dir, "%s", tmpl.c_str());
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string d = dir;
  KeyValueStore s;
  s.set = [d](const std::string& k, const std::string& v) {
    const std::string f = file_of(d, k), tmp = f + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary) << v;
    std::rename(tmp.c_str(), f.c_str());
  };
  s.wait = [d](const std::string& k, double timeout_s) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::duration<double>(std::min(timeout_s, 1e6));
    struct stat st;
    while (::stat(file_of(d, k).c_str(), &st) != 0) {
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  };
  s.get = [d](const std::string& k) {
    std::ifstream in(file_of(d, k), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  Context ctx(s, size, rank);
  MPI_Barrier(MPI_COMM_WORLD);  // every rank has read what it needs: the files can go
  if (rank == 0) std::system(fmt::format("rm -rf '{}'", d).c_str());
  return ctx;
}

}  // namespace fluxcpp::bench
