// Segments, signals and streams within one process.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "comm/stream.hpp"
#include "deadline.hpp"
#include "fluxcpp/error.hpp"
#include "shm/segment.hpp"
#include "shm/signal.hpp"

namespace fluxcpp {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

bool exists(const std::string& name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(Segment, CreatedPrivateExclusiveAndUnlinked) {
  std::string name;
  {
    shm::Segment s = shm::Segment::create("test", 10000);
    name = s.name();
    EXPECT_EQ(name.rfind("/fluxcpp-" + std::to_string(getpid()) + "-test-", 0), 0u) << name;
    EXPECT_GE(s.size(), 10000u);
    EXPECT_TRUE(s.linked());
    struct stat st {};
    ASSERT_EQ(0, stat(("/dev/shm" + name).c_str(), &st));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // O_EXCL: nobody else can create the name while it exists.
    EXPECT_LT(shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600), 0);
    EXPECT_EQ(errno, EEXIST);
    // A peer mapping sees the same bytes.
    shm::Segment peer = shm::Segment::open(name, 10000);
    EXPECT_FALSE(peer.linked());
    std::memset(s.data(), 0x5A, 100);
    EXPECT_EQ(static_cast<unsigned char*>(peer.data())[99], 0x5A);
    s.unlink();
    EXPECT_FALSE(s.linked());
    EXPECT_FALSE(exists(name));
    EXPECT_EQ(static_cast<unsigned char*>(peer.data())[0], 0x5A);  // still mapped
  }
  // A segment dropped without unlink() removes its name too.
  {
    shm::Segment s = shm::Segment::create("test", 1);
    name = s.name();
    EXPECT_TRUE(exists(name));
  }
  EXPECT_FALSE(exists(name));
}

// The names this process has in /dev/shm for `tag`.
std::vector<std::string> own_names(const std::string& tag) {
  std::vector<std::string> out;
  const std::string mine = "fluxcpp-" + std::to_string(getpid()) + "-" + tag + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(mine, 0) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

TEST(Segment, FullDevShmIsAClearErrorNotASigbus) {
  struct statvfs vfs {};
  ASSERT_EQ(0, statvfs("/dev/shm", &vfs));
  // More than the whole file system: tmpfs refuses it up front, without touching memory.
  std::size_t too_big =
      static_cast<std::size_t>(vfs.f_blocks) * vfs.f_frsize + (std::size_t{1} << 30);
  try {
    shm::Segment s = shm::Segment::create("full", too_big);
    ADD_FAILURE() << "reserving " << too_big << " bytes succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kSystem);
    std::string w = e.what();
    EXPECT_NE(w.find("/dev/shm"), std::string::npos) << w;
    EXPECT_NE(w.find("free"), std::string::npos) << w;
  }
  EXPECT_TRUE(own_names("full").empty()) << "failed create left its name behind";
}

TEST(Signal, WaitSeesValueAndPayload) {
  shm::Signal s;
  std::thread producer([&] {
    std::this_thread::sleep_for(5ms);
    s.payload[0] = 42;
    shm::signal_set(s, 7);
  });
  EXPECT_TRUE(shm::signal_wait(s, 7, clock_type::now() + 10s, {}));
  EXPECT_EQ(s.payload[0], 42u);
  producer.join();
}

TEST(Signal, SleepingWaiterIsWokenPromptly) {
  shm::Signal s;
  shm::WaitPolicy sleepy{0ns, 0ns};  // straight to the futex
  std::atomic<bool> waiting{false};
  clock_type::time_point woke;
  std::thread consumer([&] {
    waiting = true;
    EXPECT_TRUE(shm::signal_wait(s, 3, clock_type::now() + 10s, sleepy));
    woke = clock_type::now();
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(20ms);
  auto set_at = clock_type::now();
  shm::signal_set(s, 3);
  consumer.join();
  // Far below the 50 ms futex slice: the wake, not the slice, ended the sleep.
  EXPECT_LT(woke - set_at, 40ms);
}

TEST(Signal, TimeoutReportsObservedValue) {
  shm::Signal s;
  shm::signal_set(s, 4);
  uint64_t observed = 0;
  auto t0 = clock_type::now();
  EXPECT_FALSE(shm::signal_wait(s, 5, t0 + 100ms, {}, &observed));
  EXPECT_EQ(observed, 4u);
  EXPECT_GE(clock_type::now() - t0, 100ms);
  EXPECT_LT(clock_type::now() - t0, 2s);
}

TEST(Signal, AbortEndsTheWait) {
  shm::Signal s;
  std::atomic<bool> abort{false};
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    abort = true;
  });
  auto t0 = clock_type::now();
  EXPECT_FALSE(shm::signal_wait(s, 1, t0 + 30s, {}, nullptr, &abort));
  EXPECT_LT(clock_type::now() - t0, 5s);
  t.join();
}

TEST(Signal, ManyIncrementsNoneLost) {
  shm::Signal s;
  constexpr uint64_t kN = 20000;
  std::thread producer([&] {
    for (uint64_t i = 1; i <= kN; ++i) shm::signal_set(s, i);
  });
  for (uint64_t i = 1; i <= kN; i += 97)
    EXPECT_TRUE(shm::signal_wait(s, i, clock_type::now() + 10s, {}));
  EXPECT_TRUE(shm::signal_wait(s, kN, clock_type::now() + 10s, {}));
  producer.join();
}

// A deadline of time_point::max() (an infinite timeout) waits, through every phase, until the
// value arrives; nothing in the wait's arithmetic may overflow it into the past.
TEST(Signal, DeadlineMaxWaitsUntilSet) {
  for (shm::WaitPolicy policy : {shm::WaitPolicy{}, shm::WaitPolicy{0ns, 0ns}}) {
    shm::Signal s;
    std::thread producer([&] {
      std::this_thread::sleep_for(50ms);
      shm::signal_set(s, 1);
    });
    const auto t0 = clock_type::now();
    uint64_t observed = 99;
    EXPECT_TRUE(shm::signal_wait(s, 1, clock_type::time_point::max(), policy, &observed));
    const std::chrono::duration<double, std::milli> waited = clock_type::now() - t0;
    EXPECT_GE(waited.count(), 40.0) << "ms until the wait returned: before the producer set it";
    producer.join();
  }
}

TEST(Deadline, SaturatesInsteadOfOverflowing) {
  const auto max = clock_type::time_point::max();
  EXPECT_EQ(deadline_after(std::numeric_limits<double>::infinity()), max);
  EXPECT_EQ(deadline_after(1e10), max);  // 1e19 ns: beyond int64 nanoseconds
  EXPECT_EQ(deadline_after(std::numeric_limits<double>::max()), max);
  // The largest timeouts that still fit stay finite and in the future.
  const auto t0 = clock_type::now();
  const auto d = deadline_after(1e9);
  EXPECT_LT(d, max);
  EXPECT_GT(d, t0 + std::chrono::hours(24 * 365 * 30));
  const auto small = deadline_after(0.25);
  EXPECT_GE(small, t0 + 250ms);
  EXPECT_LT(small, clock_type::now() + 250ms + 1s);
  EXPECT_EQ(deadline_add(max, 5s), max);
  EXPECT_EQ(deadline_add(max - 1s, 5s), max);
  EXPECT_EQ(deadline_add(t0, 5s), t0 + 5s);
}

TEST(Deadline, InfiniteTimeoutWaitsForAStream) {
  comm::Stream st("test", {});
  uint64_t t = st.enqueue([] { std::this_thread::sleep_for(50ms); });
  EXPECT_TRUE(st.wait(t, deadline_after(std::numeric_limits<double>::infinity())));
  EXPECT_TRUE(st.wait(t, deadline_add(deadline_after(1e10), 5s)));
}

TEST(Stream, RunsTasksInOrderAndPropagatesErrors) {
  comm::Stream st("test", {});
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) st.enqueue([&order, i] { order.push_back(i); });
  uint64_t t = st.enqueue([] { throw Error(Errc::kInternal, "task failed"); });
  uint64_t after = st.enqueue([&order] { order.push_back(100); });
  try {
    st.wait(t, clock_type::now() + 10s);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "task failed");
  }
  EXPECT_TRUE(st.wait(after, clock_type::now() + 10s));
  std::atomic<bool> release{false};
  st.enqueue([&release] {
    while (!release) std::this_thread::yield();
  });
  comm::Event ev = st.record();
  EXPECT_FALSE(ev.query());
  EXPECT_FALSE(ev.wait(clock_type::now() + 50ms));  // times out: the task is still blocked
  release = true;
  EXPECT_TRUE(ev.wait(clock_type::now() + 10s));
  EXPECT_TRUE(ev.query());
  ASSERT_EQ(order.size(), 101u);
  for (int i = 0; i <= 100; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace fluxcpp
