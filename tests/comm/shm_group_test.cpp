// comm::ShmGroup, the control plane of a context made without MPI: forked processes meet through
// one rendezvous segment and run the Group collectives (chunked allgather, agree, agree_values,
// check_in), their errors and timeouts. Single process plus forked children, no MPI.
#include "comm/shm_group.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/bounded.hpp"
#include "comm/unique_id.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {
namespace {

std::string fresh_name() {
  char id[kUniqueIdBytes];
  make_unique_id(id);
  return parse_unique_id(id).segment;
}

// Runs body(rank) in `world` forked processes (each in a 20 s deadline scope); each child's exit
// status is what body returned (true: 0, false: 1; 1 when it threw). Returns the statuses.
std::vector<int> run_ranks(int world, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(60);  // watchdog
      int status = 1;
      try {
        DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::seconds(20), "test");
        status = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(status);
    }
    pids.push_back(pid);
  }
  std::vector<int> out;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    out.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  return out;
}

// The error fn raises, as code and text ("" and -1 when it raised nothing).
std::pair<int, std::string> caught(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {static_cast<int>(e.code()), e.what()};
  }
  return {-1, ""};
}

TEST(ShmGroup, ChunkedAllgatherAndPids) {
  const std::string name = fresh_name();
  const auto st = run_ranks(3, [&](int r) -> int {
    ShmGroup g(name, r, 3);
    if (g.pids().size() != 3 || g.pids()[r] != getpid()) return 1;
    // 5000 bytes per rank: five rounds of 1 KiB; twice, so the halves alternate.
    for (int call = 0; call < 2; ++call) {
      std::vector<unsigned char> mine(5000), all(3 * 5000);
      for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = (r * 31 + i * 7 + call) & 0xFF;
      g.allgather(mine.data(), all.data(), mine.size());
      for (int q = 0; q < 3; ++q)
        for (std::size_t i = 0; i < mine.size(); ++i)
          if (all[q * 5000 + i] != ((q * 31 + i * 7 + call) & 0xFF)) return 1;
    }
    const bool ok =
        max_value(g, r * 10) == 20 && allgather_strings(g, std::string(r + 1, 'a' + r)) ==
                                          std::vector<std::string>{"a", "bb", "ccc"};
    return ok ? 0 : 1;
  });
  EXPECT_EQ(st, (std::vector<int>{0, 0, 0}));
  EXPECT_NE(access(("/dev/shm" + name).c_str(), F_OK), 0) << "rendezvous name left: " << name;
}

TEST(ShmGroup, AgreeAndValuesAndCheckIn) {
  const std::string name = fresh_name();
  const auto st = run_ranks(3, [&](int r) -> int {
    ShmGroup g(name, r, 3);
    g.agree([] {});  // nothing raised: returns everywhere
    auto [code, text] = caught([&] {
      g.agree([&] {
        if (r >= 1) raise(Errc::kInvalidArgument, "bad thing on rank {}", r);
      });
    });
    const bool agreed = code == static_cast<int>(Errc::kInvalidArgument) &&
                        text.find("bad thing on rank 1") != std::string::npos &&
                        (r == 1) == (text.find("reported by") == std::string::npos);
    const char* names[2] = {"k", "n"};
    const long long values[2] = {64, r == 2 ? 7 : 8};
    auto [vcode, vtext] = caught([&] { g.agree_values("op", names, values, 2); });
    const bool disagreed = vcode == static_cast<int>(Errc::kInvalidArgument) &&
                           vtext == "op: ranks disagree on n: rank 2 passed 7, rank 0 passed 8";
    g.check_in(42, "a check-in");
    auto [ccode, ctext] = caught([&] { g.check_in(r == 0 ? 1 : 2, "the op's check-in"); });
    const bool steps = ccode == static_cast<int>(Errc::kInvalidUsage) &&
                       ctext.find("ranks are at different steps") != std::string::npos;
    if (!agreed || !disagreed || !steps)
      std::fprintf(stderr, "rank %d: '%s' / '%s' / '%s'\n", r, text.c_str(), vtext.c_str(),
                   ctext.c_str());
    return agreed && disagreed && steps ? 0 : 1;
  });
  EXPECT_EQ(st, (std::vector<int>{0, 0, 0}));
}

TEST(ShmGroup, AbsentRankTimesOutNamed) {
  const std::string name = fresh_name();
  const auto st = run_ranks(3, [&](int r) -> int {
    if (r == 2) return 0;  // never arrives
    DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::milliseconds(500),
                        "context create");
    auto [code, text] = caught([&] { ShmGroup g(name, r, 3); });
    return code == static_cast<int>(Errc::kTimeout) &&
                   text.find("rank(s) 2 did not take part") != std::string::npos
               ? 0
               : 1;
  });
  EXPECT_EQ(st, (std::vector<int>{0, 0, 0}));
  EXPECT_NE(access(("/dev/shm" + name).c_str(), F_OK), 0) << "rendezvous name left: " << name;
}

TEST(ShmGroup, MissingCreatorAndBadArguments) {
  // Rank 0 never comes: rank 1 times out naming it.
  DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::milliseconds(300), "x");
  auto [code, text] = caught([&] { ShmGroup g(fresh_name(), 1, 2); });
  EXPECT_EQ(code, static_cast<int>(Errc::kTimeout));
  EXPECT_NE(text.find("rank(s) 0 did not take part"), std::string::npos) << text;
  // Two processes pass rank 1 of 3 (so nobody passes rank 2): the second claimant is told at
  // once (status 2), and every rank waiting in the rendezvous fails with INVALID_ARGUMENT naming
  // the rank and both pids (status 0), long before the deadline.
  const std::string name = fresh_name();
  auto st = run_ranks(3, [&](int r) -> int {
    DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::seconds(10), "x");
    const auto t0 = std::chrono::steady_clock::now();
    auto [c, t] = caught([&] { ShmGroup g(name, r == 0 ? 0 : 1, 3); });
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(8)) return 1;
    if (c == static_cast<int>(Errc::kInvalidArgument) &&
        t.find("rank 1 is taken already") != std::string::npos)
      return 2;
    if (c == static_cast<int>(Errc::kInvalidArgument) &&
        t.find("two processes passed rank 1") != std::string::npos)
      return 0;
    std::fprintf(stderr, "rank %d: %d '%s'\n", r, c, t.c_str());
    return 1;
  });
  std::sort(st.begin(), st.end());
  EXPECT_EQ(st, (std::vector<int>{0, 0, 2}));
  // Another world size than rank 0's: that rank is told, rank 0 times out.
  const std::string other = fresh_name();
  const auto sizes = run_ranks(2, [&](int r) -> int {
    DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::seconds(1), "x");
    auto [c, t] = caught([&] { ShmGroup g(other, r, r == 0 ? 2 : 3); });
    if (r == 0) return c == static_cast<int>(Errc::kTimeout) ? 0 : 1;
    return c == static_cast<int>(Errc::kInvalidArgument) &&
                   t.find("world_size=3 on rank 1, but rank 0 passed 2") != std::string::npos
               ? 0
               : 1;
  });
  EXPECT_EQ(sizes, (std::vector<int>{0, 0}));
}

// Retries while the others wait: a non-zero rank that timed out withdraws and, retrying, meets
// them; rank 0 that timed out marks its segment abandoned, and the ranks still waiting meet its
// retry in the next one. Rank 2 arrives 1 s late; every rank ends with the rendezvous made.
TEST(ShmGroup, RetriesMeetTheRanksStillWaiting) {
  for (const int quick : {1, 0}) {  // the rank whose first deadline is too short
    const std::string name = fresh_name();
    const auto st = run_ranks(3, [&](int r) -> int {
      if (r == 2) usleep(1000 * 1000);
      const auto t0 = std::chrono::steady_clock::now();
      if (r == quick) {
        DeadlineScope scope(t0 + std::chrono::milliseconds(300), "first");
        auto [c, t] = caught([&] { ShmGroup g(name, r, 3); });
        if (c != static_cast<int>(Errc::kTimeout)) {  // who it names depends on who was there
          std::fprintf(stderr, "rank %d first: %d '%s'\n", r, c, t.c_str());
          return 1;
        }
      }
      DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::seconds(8), "retry");
      ShmGroup g(name, r, 3);
      return g.pids().size() == 3 && g.pids()[r] == getpid() ? 0 : 1;
    });
    EXPECT_EQ(st, (std::vector<int>{0, 0, 0})) << "rank " << quick << " retried";
    EXPECT_NE(access(("/dev/shm" + name).c_str(), F_OK), 0) << "rendezvous name left: " << name;
  }
}

// Identity before trust: a rank accepts the rendezvous only when it carries the id's secret (in
// no name), and only a segment of this user's with mode 600. A segment made under the name by a
// stranger, or by another job that knows the name, is refused with INVALID_USAGE, never joined.
TEST(ShmGroup, StrangersSegmentIsRefused) {
  char id[kUniqueIdBytes];
  make_unique_id(id);
  const ParsedId p = parse_unique_id(id);
  ASSERT_EQ(p.secret.size(), kIdSecretBytes);
  // Another "job" creates the rendezvous under this name with another secret: rank 1 of this
  // job refuses it at once; that job's rank 0 times out (nobody joined it).
  const auto st = run_ranks(2, [&](int r) -> int {
    DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::seconds(2), "x");
    auto [c, t] = caught(
        [&] { ShmGroup g(p.segment, r, 2, r == 0 ? std::string(kIdSecretBytes, 'x') : p.secret); });
    if (r == 0) return c == static_cast<int>(Errc::kTimeout) ? 0 : 1;
    if (c == static_cast<int>(Errc::kInvalidUsage) &&
        t.find("does not carry this id's secret") != std::string::npos)
      return 0;
    std::fprintf(stderr, "rank 1: %d '%s'\n", c, t.c_str());
    return 1;
  });
  EXPECT_EQ(st, (std::vector<int>{0, 0}));
  EXPECT_NE(access(("/dev/shm" + p.segment).c_str(), F_OK), 0) << "name left: " << p.segment;

  // A segment under the name that others may write (mode 666), as a squatter would leave it:
  // refused before a byte of it is read.
  const std::string squat = fresh_name();
  const int fd = shm_open(squat.c_str(), O_CREAT | O_EXCL | O_RDWR, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0666), 0);
  ASSERT_EQ(ftruncate(fd, 1 << 16), 0);
  close(fd);
  DeadlineScope scope(std::chrono::steady_clock::now() + std::chrono::seconds(2), "x");
  auto [c, t] = caught([&] { ShmGroup g(squat, 1, 2); });
  shm_unlink(squat.c_str());
  EXPECT_EQ(c, static_cast<int>(Errc::kInvalidUsage)) << t;
  EXPECT_NE(t.find("mode 666"), std::string::npos) << t;
}

}  // namespace
}  // namespace fluxcpp::comm
