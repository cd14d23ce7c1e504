#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "mpi_test.hpp"

namespace fluxcpp::test {

namespace {

int g_rank = 0, g_size = 1;

// Collects this rank's failure messages of the current test.
class FailureCollector : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo&) override { messages.clear(); }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed() || forwarding) return;
    std::string m = std::string(r.file_name() ? r.file_name() : "?") + ":" +
                    std::to_string(r.line_number()) + ": " + r.message() + "\n";
    messages += m;
    // Ranks other than 0 print nothing else: say it now, in case this rank never reaches the
    // TearDown that forwards it (a hang the watchdog will end).
    if (g_rank != 0) std::fprintf(stderr, "[rank %d] %s", g_rank, m.c_str());
  }
  std::string messages;
  bool forwarding = false;
};
FailureCollector* g_collector = nullptr;

// Aborts the job when one test overruns. Re-armed at every test start.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  explicit Watchdog(double seconds) : seconds_(seconds), thread_([this] { loop(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const ::testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lk(mu_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(seconds_));
    armed_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      if (armed_ && std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr,
                     "[rank %d] WATCHDOG: test %s still running after %.0f s; aborting the job\n",
                     g_rank, name_.c_str(), seconds_);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 99);
        std::_Exit(99);
      }
      if (armed_)
        cv_.wait_until(lk, deadline_);
      else
        cv_.wait(lk);
    }
  }
  double seconds_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_{};
  bool armed_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace

int world_rank() {
  return g_rank;
}
int world_size() {
  return g_size;
}

int test_ranks_per_host() {
  const char* v = std::getenv("FLUXCPP_TEST_RANKS_PER_NODE");
  return v != nullptr ? std::atoi(v) : 0;
}

ContextOptions test_options(double timeout_s) {
  ContextOptions o;
  o.ranks_per_host = test_ranks_per_host();
  o.timeout_s = timeout_s;
  return o;
}

ContextOptions threaded_options(int compute_threads) {
  ContextOptions o = test_options();
  o.compute_threads = compute_threads;
  return o;
}

bool any_rank(bool v) {
  int x = v ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return x != 0;
}

void MpiTest::TearDown() {
  // Agree on the verdict and bring every rank's messages to rank 0.
  std::string mine = g_collector->messages;
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(g_size);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> displs(g_size, 0);
  int total = 0;
  for (int i = 0; i < g_size; ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::string all(static_cast<std::size_t>(g_rank == 0 ? total : 0), '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  bool failed = any_rank(HasFailure());
  if (g_rank == 0) {
    g_collector->forwarding = true;
    for (int r = 1; r < g_size; ++r)
      if (lens[r] > 0)
        ADD_FAILURE() << "rank " << r << " failed:\n" << all.substr(displs[r], lens[r]);
    g_collector->forwarding = false;
  }
  if (failed && !HasFailure()) {
    g_collector->forwarding = true;
    ADD_FAILURE() << "failed on another rank (see rank 0's report)";
    g_collector->forwarding = false;
  }
}

namespace {

// When this process started (seconds since the epoch, to the clock tick), from /proc: its start
// in ticks since boot, and the boot's wall-clock time from the two clocks now (to the
// microsecond; /proc/stat's btime is whole seconds).
double process_start_time() {
  timespec real{}, since_boot{};
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_BOOTTIME, &since_boot);
  const double boot = static_cast<double>(real.tv_sec - since_boot.tv_sec) +
                      static_cast<double>(real.tv_nsec - since_boot.tv_nsec) * 1e-9;
  unsigned long long ticks = 0;
  if (FILE* f = std::fopen("/proc/self/stat", "r")) {
    char buf[1024] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // Field 22 (starttime), counted after the ")" that ends the command name (field 2).
    if (const char* p = std::strrchr(buf, ')')) {
      int field = 2;
      for (const char* q = p + 1; *q != '\0' && field < 22; ++q)
        if (*q == ' ' && ++field == 22) ticks = std::strtoull(q + 1, nullptr, 10);
    }
  }
  return boot + static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The /dev/shm entries this process has open (a live segment keeps its fd: shm::Segment).
std::set<std::string> shm_open_here() {
  std::set<std::string> out;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char link[PATH_MAX];
      const ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
      if (n <= 0) continue;
      link[n] = '\0';
      if (std::strncmp(link, "/dev/shm/", 9) == 0) out.insert(link + 9);
    }
    closedir(d);
  }
  return out;
}

// True when a live process holds the entry's liveness lock (flock, src/shm/liveness.hpp).
bool shm_entry_held(int dir, const char* name) {
  const int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

}  // namespace

std::vector<std::string> fluxcpp_shm_entries(bool own_only) {
  std::vector<std::string> out;
  const std::string mine = "fluxcpp-" + std::to_string(static_cast<long>(getpid())) + "-";
  // A segment named after this pid but made before this process started is a dead process's
  // whose pid was reused (pid_max is 32768 here: pids wrap within a test run), or a neighbour's
  // in another PID namespace (fault.shm_neighbours' squatter makes names for coming pids), not
  // ours. Compared to the clock tick (10 ms), with a tick and a little of slack.
  const double started = own_only ? process_start_time() : 0.0;
  // A name of this pid made since it started that another live process holds, and this process
  // does not have open, is that process's: fault.shm_neighbours' squatter takes the names of pids
  // near every name it sees, and the sanitizer subset runs beside it.
  const std::set<std::string> here = own_only ? shm_open_here() : std::set<std::string>{};
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).find(own_only ? mine : "fluxcpp") == std::string::npos) continue;
      struct stat st {};
      if (own_only && fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
          static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9 <
              started - 0.05)
        continue;
      if (own_only && here.count(e->d_name) == 0 && shm_entry_held(dirfd(d), e->d_name)) continue;
      out.push_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

}  // namespace fluxcpp::test

int main(int argc, char** argv) {
  int provided = 0;
  // FLUXCPP_TEST_THREAD_LEVEL=single exercises the thread-level rule of multi-host contexts.
  const char* level = std::getenv("FLUXCPP_TEST_THREAD_LEVEL");
  bool single = level != nullptr && std::string(level) == "single";
  MPI_Init_thread(&argc, &argv, single ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &fluxcpp::test::g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &fluxcpp::test::g_size);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (fluxcpp::test::g_rank != 0) delete listeners.Release(listeners.default_result_printer());
  fluxcpp::test::g_collector = new fluxcpp::test::FailureCollector;
  listeners.Append(fluxcpp::test::g_collector);
  const char* wd = std::getenv("FLUXCPP_TEST_WATCHDOG_S");
  listeners.Append(new fluxcpp::test::Watchdog(wd != nullptr ? std::atof(wd) : 240.0));
  int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
