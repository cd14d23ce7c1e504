// Segment names and the liveness lock (issue 19): every name carries 128 fresh random bits, a
// name that exists already is retried with fresh bits, and the cleaner removes the segment of a
// dead creator but never a live one's — not from the creator's own process, not from a fork child
// of it, not while the creator is making it. Single process (plus forked children).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fluxcpp/error.hpp"
#include "shm/liveness.hpp"
#include "shm/segment.hpp"
#include "shm/segment_name.hpp"

namespace fluxcpp::shm {
namespace {

bool exists(const std::string& name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// True when some open file description holds the name's liveness lock.
bool locked(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

// Random sources for the seam: a counter (so the test knows which names come next), and one that
// always returns the same bits.
std::atomic<uint32_t> g_counter{0};
void counting_source(unsigned char* buf, std::size_t n) {
  std::memset(buf, 0xA5, n);
  const uint32_t c = g_counter.fetch_add(1);
  std::memcpy(buf, &c, std::min(n, sizeof c));
}
void constant_source(unsigned char* buf, std::size_t n) {
  std::memset(buf, 0x42, n);
}
std::size_t g_requested = 0;
void ascending_source(unsigned char* buf, std::size_t n) {
  g_requested = n;
  for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<unsigned char>(i);
}

class RandomHook {
 public:
  explicit RandomHook(RandomSource s) : previous_(set_random_for_testing(s)) {}
  ~RandomHook() { set_random_for_testing(previous_); }

 private:
  RandomSource previous_;
};

// A name held like a live creator holds it (created, locked): no cleaner may remove it.
struct Squat {
  std::string name;
  int fd = -1;
  explicit Squat(std::string n) : name(std::move(n)) {
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << name << ": " << std::strerror(errno);
    if (fd >= 0) EXPECT_EQ(0, flock(fd, LOCK_EX | LOCK_NB));
  }
  ~Squat() {
    shm_unlink(name.c_str());
    if (fd >= 0) close(fd);
  }
};

TEST(SegmentName, FreshRandomPartOf128Bits) {
  const std::string prefix = "/fluxcpp-" + std::to_string(getpid()) + "-ag1-";
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    const std::string name = unique_segment_name("ag1");
    ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
    const std::string random = name.substr(prefix.size());
    EXPECT_EQ(random.size(), 32u) << name;
    EXPECT_EQ(random.find_first_not_of("0123456789abcdef"), std::string::npos) << name;
    EXPECT_TRUE(seen.insert(random).second) << "random part repeated: " << name;
  }
  // Every one of the 16 bytes drawn shows in the name.
  RandomHook hook(ascending_source);
  EXPECT_EQ(unique_segment_name("ag1"), prefix + "000102030405060708090a0b0c0d0e0f");
  EXPECT_EQ(g_requested, 16u);
}

TEST(SegmentName, TagsThatCouldEscapeTheNameAreRefused) {
  for (const char* tag : {"", "a/b", "a-b", "../x", "a b"}) {
    try {
      unique_segment_name(tag);
      ADD_FAILURE() << "tag \"" << tag << "\" accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::kInternal) << e.what();
    }
  }
}

TEST(Segment, NameTakenAlreadyIsRetriedWithFreshBits) {
  RandomHook hook(counting_source);
  // A squatter holds the first five names the create will draw.
  g_counter = 0;
  std::vector<std::unique_ptr<Squat>> squats;
  for (int i = 0; i < 5; ++i) squats.push_back(std::make_unique<Squat>(unique_segment_name("sq")));
  const std::string sixth = unique_segment_name("sq");
  g_counter = 0;
  Segment s = Segment::create("sq", 4096);
  EXPECT_EQ(s.name(), sixth);
  EXPECT_TRUE(exists(s.name()));
  EXPECT_TRUE(locked(s.name()));
  for (const auto& q : squats) EXPECT_NE(q->name, s.name());
}

TEST(Segment, EveryAttemptTakenIsAClearError) {
  RandomHook hook(constant_source);
  Squat squat(unique_segment_name("taken"));
  try {
    Segment s = Segment::create("taken", 4096);
    ADD_FAILURE() << "created " << s.name() << " although every name drawn was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kSystem);
    const std::string w = e.what();
    EXPECT_NE(w.find("/dev/shm"), std::string::npos) << w;
    EXPECT_NE(w.find(std::to_string(Segment::kCreateAttempts) + " fresh random names"),
              std::string::npos)
        << w;
  }
  EXPECT_TRUE(exists(squat.name)) << "the squatter's name was removed";
}

TEST(Liveness, CleanerKeepsALiveCreatorsSegmentInItsOwnProcess) {
  Segment s = Segment::create("live", 4096);
  remove_stale_segments();
  EXPECT_TRUE(exists(s.name()));
  EXPECT_TRUE(locked(s.name()));
}

TEST(Liveness, CleanerInAForkChildKeepsTheParentsSegment) {
  Segment s = Segment::create("live", 4096);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    remove_stale_segments();
    _exit(exists(s.name()) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(child, waitpid(child, &status, 0));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_TRUE(exists(s.name()));
}

// A fork child's copy of a Segment neither removes the name nor releases the lock: unlink() is
// a no-op there and its destructor only unmaps and closes the child's copy of the fd.
TEST(Liveness, ForkChildNeverUnlinksNorUnlocks) {
  Segment s = Segment::create("forked", 4096);
  const std::string name = s.name();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    s.unlink();
    { Segment gone = std::move(s); }
    int code = 0;
    if (!exists(name)) code |= 1;
    if (!locked(name)) code |= 2;
    remove_stale_segments();
    if (!exists(name)) code |= 4;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(child, waitpid(child, &status, 0));
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: name gone after the child's unlink/destructor, 2: lock "
                                       "released, 4: the child's cleaner removed it";
  EXPECT_TRUE(s.linked());
  EXPECT_TRUE(exists(name));
  EXPECT_TRUE(locked(name));
  s.unlink();
  EXPECT_FALSE(exists(name));
}

// A creator that dies with its name linked (a child that creates a segment and _exits, so no
// destructor runs: leaked on purpose) leaves an unlocked segment, which the cleaner removes.
TEST(Liveness, CleanerRemovesADeadCreatorsSegment) {
  int fds[2];
  ASSERT_EQ(0, pipe(fds));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    try {
      Segment s = Segment::create("dead", 4096);
      const std::string& n = s.name();
      if (write(fds[1], n.data(), n.size()) != static_cast<ssize_t>(n.size())) _exit(2);
      _exit(0);  // no destructor: the name stays linked, the lock dies with the process
    } catch (...) {
      _exit(1);
    }
  }
  close(fds[1]);
  char buf[256] = {};
  const ssize_t got = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(child, waitpid(child, &status, 0));
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  ASSERT_GT(got, 0);
  const std::string name(buf, static_cast<std::size_t>(got));
  // (Another process's sweep may have removed it already; what matters is that it goes.)
  if (exists(name)) {
    EXPECT_FALSE(locked(name));
    EXPECT_GE(remove_stale_segments(), 1);
  }
  EXPECT_FALSE(exists(name)) << name;
}

// Creators racing a cleaner that sweeps without pause: every create succeeds, and the name it
// returns exists and is locked (a name the cleaner took between shm_open and flock is detected
// and replaced by a fresh one).
TEST(Liveness, CreateRacingACleanerAlwaysEndsLinkedAndLocked) {
  std::atomic<bool> stop{false};
  std::thread cleaner([&] {
    while (!stop) remove_stale_segments();
  });
  int bad = 0;
  for (int i = 0; i < 1000; ++i) {
    Segment s = Segment::create("race", 4096);
    if (!exists(s.name()) || !locked(s.name())) ++bad;
  }
  stop = true;
  cleaner.join();
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace fluxcpp::shm
