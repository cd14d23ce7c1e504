// Neighbours sharing /dev/shm, driven by shm_neighbours.sh (issue 19: jobs in other PID
// namespaces, name squatting). Two modes:
//   loop SECONDS   under mpirun: creates a context, an all_gather and a gemm_rs, runs a forward of
//                  each and checks the results, destroys them, again and again for SECONDS (rank
//                  0 decides when to stop). Prints "neighbour: pid P" per rank, then
//                  "neighbour: rank R PASS N iterations" or "neighbour: rank R FAIL <error>".
//   squat SECONDS  alone, no MPI: creates /dev/shm names another local user could derive or guess
//                  for the jobs about to start (the pids the kernel hands out next, the op tags of
//                  the old "/fluxcpp-<pid>-<host token>-<tag>" scheme with every host token seen
//                  in /dev/shm, the new scheme's "/fluxcpp-<pid>-<tag>-<32 hex>" with guessed
//                  bits), holds each under flock like a live creator (so no cleaner removes
//                  them) and prints "neighbour: squatting N names". Then, until SECONDS have
//                  passed or SIGTERM/SIGINT, it watches /dev/shm and squats what every name it
//                  sees suggests (the same host token or random part with nearby pids and the
//                  next serials); at the end it removes every name it holds.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.hpp"

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;

void on_signal(int) {
  g_stop = 1;
}

long next_pid() {
  std::ifstream f("/proc/sys/kernel/ns_last_pid");
  long p = 0;
  f >> p;
  return p > 0 ? p : static_cast<long>(getpid());
}

// Host tokens of the old scheme visible in /dev/shm: "fluxcpp-<pid>-<16 hex>-<tag>".
std::set<std::string> seen_tokens() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("fluxcpp-", 0) != 0) continue;
      const auto a = n.find('-', 8);
      if (a == std::string::npos || n.size() < a + 18 || n[a + 17] != '-') continue;
      out.insert(n.substr(a + 1, 16));
    }
    closedir(d);
  }
  return out;
}

// Names held like a live creator holds them: created, and locked (one fd each, so bounded).
constexpr std::size_t kMaxHeld = 8000;
struct Held {
  std::vector<std::string> names;
  std::vector<int> fds;
  std::set<std::string> own;  // entries ("fluxcpp-...") held
  void take(const std::string& n) {
    if (names.size() >= kMaxHeld) return;
    const int fd = shm_open(n.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      shm_unlink(n.c_str());
      close(fd);
      return;
    }
    names.push_back(n);
    fds.push_back(fd);
    own.insert(n.substr(1));
  }
};

// Squats what a name seen in /dev/shm suggests: "fluxcpp-<pid>-<a>-<b>" (old scheme: a the host
// token, b the tag; new: a the tag, b the random part) with pid-4..pid+4 and the tag's serial and
// the next, for both ops, keeping the other part.
void watch(Held& held, std::set<std::string>& seen) {
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return;
  std::vector<std::string> fresh;
  while (const dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("fluxcpp-", 0) == 0 && held.own.count(n) == 0 && seen.insert(n).second)
      fresh.push_back(n);
  }
  closedir(d);
  for (const std::string& n : fresh) {
    const auto a = n.find('-', 8);
    const auto b = a == std::string::npos ? a : n.find('-', a + 1);
    if (b == std::string::npos) continue;
    const long pid = std::atol(n.c_str() + 8);
    const bool old_scheme = b - a - 1 == 16;
    const std::string tag = old_scheme ? n.substr(b + 1) : n.substr(a + 1, b - a - 1);
    const std::string keep = old_scheme ? n.substr(a + 1, 16) : n.substr(b + 1);
    const auto digits = tag.find_first_of("0123456789");
    if (digits == std::string::npos) continue;
    const int serial = std::atoi(tag.c_str() + digits);
    for (const char* op : {"all_gather", "gemm_rs"})
      for (int sn = serial; sn <= serial + 1; ++sn)
        for (long p = pid - 4; p <= pid + 4; ++p) {
          if (p <= 0) continue;
          const std::string t = std::string(op) + std::to_string(sn);
          held.take("/fluxcpp-" + std::to_string(p) + "-" +
                    (old_scheme ? keep + "-" + t : t + "-" + keep));
        }
  }
}

int squat(double seconds) {
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  std::vector<std::string> names;
  const long first = next_pid() + 1;
  std::set<std::string> tokens = seen_tokens();
  tokens.insert("0000000000000000");
  for (long pid = first; pid < first + 48; ++pid) {
    for (int serial = 1; serial <= 3; ++serial) {
      for (const char* op : {"all_gather", "gemm_rs"}) {
        const std::string tag = std::string(op) + std::to_string(serial);
        for (const std::string& t : tokens)
          names.push_back("/fluxcpp-" + std::to_string(pid) + "-" + t + "-" + tag);
        names.push_back("/fluxcpp-" + std::to_string(pid) + "-" + tag);
        names.push_back("/fluxcpp-" + std::to_string(pid) + "-" + tag + "-" + std::string(32, '0'));
        names.push_back("/fluxcpp-" + std::to_string(pid) + "-" + tag + "-" + std::string(32, 'f'));
        unsigned char r[16];
        if (getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) return 2;
        char hex[33];
        for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", r[i]);
        names.push_back("/fluxcpp-" + std::to_string(pid) + "-" + tag + "-" + hex);
      }
    }
  }
  Held held;
  for (const std::string& n : names) held.take(n);
  std::printf("neighbour: squatting %zu names (pids %ld..%ld)\n", held.names.size(), first,
              first + 47);
  std::fflush(stdout);
  const std::size_t initial = held.names.size();
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::set<std::string> seen;
  while (!g_stop && Clock::now() < end) {
    watch(held, seen);
    usleep(2000);
  }
  std::printf("neighbour: squatted %zu more names while the jobs ran\n",
              held.names.size() - initial);
  for (std::size_t i = 0; i < held.names.size(); ++i) {
    shm_unlink(held.names[i].c_str());
    close(held.fds[i]);
  }
  std::printf("neighbour: squat over, %zu names removed\n", held.names.size());
  return 0;
}

// One iteration: context, two ops, a forward each with checked results, destroy.
void iteration(int rank, int world) {
  fluxcpp::ContextOptions o;
  o.timeout_s = 60;
  fluxcpp::Context ctx(MPI_COMM_WORLD, o);
  const int64_t rows = 8, k = 16, n = 8;
  fluxcpp::AllGather ag(ctx, {rows * world, k, fluxcpp::DType::kFloat32});
  std::vector<float> in(static_cast<std::size_t>(rows * k), static_cast<float>(rank + 1));
  std::vector<float> out(static_cast<std::size_t>(rows * k * world), -1.0f);
  ag.forward(in.data(), rows * world, out.data());
  for (int s = 0; s < world; ++s)
    for (int64_t i = 0; i < rows * k; ++i)
      if (out[static_cast<std::size_t>(s * rows * k + i)] != static_cast<float>(s + 1))
        throw std::runtime_error("all_gather: wrong value from rank " + std::to_string(s));
  // gemm_rs: every rank's [m, k] input times its [n, k] weight, summed over the ranks.
  fluxcpp::GemmRs rs(ctx, {rows * world, n, k, fluxcpp::DType::kFloat32});
  std::vector<float> a(static_cast<std::size_t>(rows * world * k), 1.0f);
  std::vector<float> b(static_cast<std::size_t>(n * k), 1.0f);
  std::vector<float> c(static_cast<std::size_t>(rows * n), -1.0f);
  rs.forward(a.data(), rows * world, b.data(), nullptr, c.data());
  for (float v : c)
    if (v != static_cast<float>(k * world))
      throw std::runtime_error("gemm_rs: got " + std::to_string(v) + ", expected " +
                               std::to_string(k * world));
  ctx.close();
}

int loop(double seconds) {
  int provided = 0, rank = 0, world = 1;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::printf("neighbour: pid %ld\n", static_cast<long>(getpid()));
  std::fflush(stdout);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  long iterations = 0;
  std::string error;
  for (;;) {
    int go = rank == 0 ? (Clock::now() < end ? 1 : 0) : 0;
    MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!go) break;
    try {
      iteration(rank, world);
      ++iterations;
    } catch (const std::exception& e) {
      error = e.what();
      break;
    }
  }
  if (error.empty())
    std::printf("neighbour: rank %d PASS %ld iterations\n", rank, iterations);
  else
    std::printf("neighbour: rank %d FAIL after %ld iterations: %s\n", rank, iterations,
                error.c_str());
  std::fflush(stdout);
  if (!error.empty()) _exit(1);  // the peers may sit in a collective: leave without finalize
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "loop") != 0 && std::strcmp(argv[1], "squat") != 0)) {
    std::fprintf(stderr, "usage: shm_neighbour loop|squat SECONDS\n");
    return 2;
  }
  const double seconds = std::atof(argv[2]);
  return std::strcmp(argv[1], "loop") == 0 ? loop(seconds) : squat(seconds);
}
