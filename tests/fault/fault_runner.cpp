// One fault scenario per run, through the C ABI (run by fault.cmake under mpirun with
// orte_abort_on_non_zero_status=0, so the survivors outlive a dead rank). The victim is the last
// rank. Scenarios (argv[1]):
//   bootstrap          the victim is SIGKILLed inside an op create, its segment created and its
//                      name not yet removed: the others' create is TIMEOUT naming it.
//   null_ctx_create    the victim passes a NULL context to an op create (and then leaves the
//                      context alone for longer than the timeout): it gets INVALID_ARGUMENT, the
//                      others TIMEOUT naming it.
//   skip_create        the victim returns early instead of creating the op and destroys its
//                      context: the others' create is INVALID_USAGE naming it (it is at another
//                      step of the context).
//   comm_null          the victim creates its context on MPI_COMM_NULL: it gets INVALID_ARGUMENT,
//                      the others TIMEOUT.
//   skip_destroy       the victim never destroys its context: the others' destroy is TIMEOUT
//                      naming it.
//   forward OP ACTION OFFLOAD   the victim SIGKILLs (kill) or SIGSTOPs (stop) itself inside the
//                      second forward of OP (ag_gemm, gemm_rs, all_to_all_single,
//                      gemm_a2a_transpose) with FLUXCPP_COPY_OFFLOAD=OFFLOAD: the others' call is
//                      TIMEOUT naming it, the op stays broken (INVALID_USAGE), its destroy is
//                      local (SUCCESS at once) and the context destroy, a check-in the victim
//                      misses, is TIMEOUT naming it within the timeout.
// Every rank that lives prints "fault: rank R PASS|FAIL ..."; rank 0 prints how many PASS lines
// to expect. When every rank lives, every rank then calls MPI_Finalize, which must return
// whatever the failed creates and destroys abandoned ("fault: rank R finalized"). Otherwise the
// survivors SIGKILL a stopped victim and leave without MPI_Finalize (a peer is gone).
// fault.cmake checks /dev/shm for the job's segments.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fluxcpp/fluxcpp.h"

namespace {

constexpr double kTimeout = 1.5;
constexpr double kSlack = 3.0;  // a shared, oversubscribed CI box

using Clock = std::chrono::steady_clock;

struct Run {
  int rank = 0, world = 1, victim = 0;
  std::string fails;  // empty: PASS
  void check(bool ok, const std::string& what) {
    if (!ok) fails += (fails.empty() ? "" : "; ") + what;
  }
};

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The message names rank `r` and no other ("rank R", or R alone in "rank(s) R").
bool names(const std::string& msg, int r) {
  const std::string me = std::to_string(r);
  if (msg.find("rank(s) " + me + " did") != std::string::npos) return true;
  if (msg.find("rank(s) ") != std::string::npos) return false;  // a list: more than r
  return msg.find("rank " + me) != std::string::npos;
}

// Runs `fn`, checks its status and timing; a TIMEOUT must name the victim ("rank V").
void expect(Run& run, const char* what, fluxcpp_status_t want, bool name_victim,
            const std::function<fluxcpp_status_t()>& fn) {
  const auto t0 = Clock::now();
  const fluxcpp_status_t got = fn();
  const double secs = since(t0);
  const std::string msg = got == FLUXCPP_SUCCESS ? "" : fluxcpp_last_error();
  std::printf("fault: rank %d %s -> %s in %.2f s: %s\n", run.rank, what, fluxcpp_status_string(got),
              secs, msg.c_str());
  run.check(got == want, std::string(what) + " returned " + fluxcpp_status_string(got) +
                             ", expected " + fluxcpp_status_string(want));
  run.check(secs < kTimeout + kSlack, std::string(what) + " took " + std::to_string(secs) + " s");
  if (name_victim)
    run.check(names(msg, run.victim),
              std::string(what) + " does not name rank " + std::to_string(run.victim));
}

// Returns within the timeout plus slack, whatever the status.
void expect_returns(Run& run, const char* what, const std::function<fluxcpp_status_t()>& fn) {
  const auto t0 = Clock::now();
  const fluxcpp_status_t got = fn();
  const double secs = since(t0);
  std::printf("fault: rank %d %s -> %s in %.2f s: %s\n", run.rank, what, fluxcpp_status_string(got),
              secs, got == FLUXCPP_SUCCESS ? "" : fluxcpp_last_error());
  run.check(secs < kTimeout + kSlack, std::string(what) + " took " + std::to_string(secs) + " s");
}

fluxcpp_context_config_t config() {
  fluxcpp_context_config_t c = FLUXCPP_CONTEXT_CONFIG_INIT;
  c.timeout_s = kTimeout;
  return c;
}

// One of the ops under test behind a uniform face.
struct Op {
  std::function<fluxcpp_status_t(fluxcpp_context_t)> create;
  std::function<fluxcpp_status_t()> forward;
  std::function<fluxcpp_status_t()> destroy;
};

Op make_op(const std::string& name, int W) {
  struct Data {
    std::vector<float> a, b, c, d;
    std::vector<int64_t> splits;
    void* h = nullptr;
  };
  auto d = std::make_shared<Data>();
  const int64_t rows = 32, k = 48, n = 40;
  d->a.assign(static_cast<std::size_t>(rows * W * k), 0.5f);
  d->b.assign(static_cast<std::size_t>(n * k * W), 0.25f);
  d->c.assign(static_cast<std::size_t>(rows * W * n * W), 0.0f);
  d->d.assign(static_cast<std::size_t>(rows * W * k), 0.0f);
  d->splits.assign(W, rows);
  const auto f32 = FLUXCPP_FLOAT32;
  Op op;
  if (name == "ag_gemm") {
    // More rows than the decode-sized latency path takes (m <= 128), as for gemm_rs below.
    const int64_t m = 160 * W;
    d->a.assign(static_cast<std::size_t>(m / W * k), 0.5f);
    d->c.assign(static_cast<std::size_t>(m * n), 0.0f);
    d->d.assign(static_cast<std::size_t>(m * k), 0.0f);
    op.create = [=](fluxcpp_context_t c) {
      return fluxcpp_ag_gemm_create(c, m, n, k, f32, f32, 0,
                                    reinterpret_cast<fluxcpp_ag_gemm_t*>(&d->h));
    };
    op.forward = [=] {
      return fluxcpp_ag_gemm_forward(static_cast<fluxcpp_ag_gemm_t>(d->h), d->a.data(), m,
                                     d->b.data(), nullptr, d->c.data(), d->d.data());
    };
    op.destroy = [=] { return fluxcpp_ag_gemm_destroy(static_cast<fluxcpp_ag_gemm_t>(d->h)); };
  } else if (name == "gemm_rs") {
    // More rows than the decode-sized latency path takes (m <= 128): there the victim's data
    // rides on the handshake, so the others finish the second forward and time out, naming it,
    // in the third; here they must meet the victim's death inside the second.
    const int64_t m = 160 * W;
    d->a.assign(static_cast<std::size_t>(m * k), 0.5f);
    d->c.assign(static_cast<std::size_t>(m * n), 0.0f);
    op.create = [=](fluxcpp_context_t c) {
      return fluxcpp_gemm_rs_create(c, m, n, k, f32, f32, 0,
                                    reinterpret_cast<fluxcpp_gemm_rs_t*>(&d->h));
    };
    op.forward = [=] {
      return fluxcpp_gemm_rs_forward(static_cast<fluxcpp_gemm_rs_t>(d->h), d->a.data(), m,
                                     d->b.data(), nullptr, d->c.data());
    };
    op.destroy = [=] { return fluxcpp_gemm_rs_destroy(static_cast<fluxcpp_gemm_rs_t>(d->h)); };
  } else if (name == "all_to_all_single") {
    op.create = [=](fluxcpp_context_t c) {
      return fluxcpp_all_to_all_single_create(
          c, rows * W, k, f32, reinterpret_cast<fluxcpp_all_to_all_single_t*>(&d->h));
    };
    op.forward = [=] {
      return fluxcpp_all_to_all_single_forward(static_cast<fluxcpp_all_to_all_single_t>(d->h),
                                               d->a.data(), d->splits.data(), d->d.data(),
                                               d->splits.data());
    };
    op.destroy = [=] {
      return fluxcpp_all_to_all_single_destroy(static_cast<fluxcpp_all_to_all_single_t>(d->h));
    };
  } else if (name == "gemm_a2a_transpose") {
    // bs 1, seq rows*W (this rank: rows), hidden k, nheads W, head_dim 8.
    op.create = [=](fluxcpp_context_t c) {
      return fluxcpp_gemm_a2a_transpose_create(
          c, 1, rows * W, k, W, 8, f32, f32,
          reinterpret_cast<fluxcpp_gemm_a2a_transpose_t*>(&d->h));
    };
    op.forward = [=] {
      return fluxcpp_gemm_a2a_transpose_forward(static_cast<fluxcpp_gemm_a2a_transpose_t>(d->h),
                                                d->a.data(), 1, rows * W, d->b.data(), nullptr,
                                                d->c.data());
    };
    op.destroy = [=] {
      return fluxcpp_gemm_a2a_transpose_destroy(static_cast<fluxcpp_gemm_a2a_transpose_t>(d->h));
    };
  } else {
    std::fprintf(stderr, "fault: unknown op %s\n", name.c_str());
    std::exit(2);
  }
  return op;
}

void set_env(const std::string& k, const std::string& v) {
  setenv(k.c_str(), v.c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_runner SCENARIO [OP ACTION OFFLOAD]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  Run run;
  MPI_Comm_rank(MPI_COMM_WORLD, &run.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &run.world);
  run.victim = run.world - 1;
  const int W = run.world;
  const bool is_victim = run.rank == run.victim;
  std::vector<long> pids(W);
  const long pid = static_cast<long>(getpid());
  MPI_Allgather(&pid, 1, MPI_LONG, pids.data(), 1, MPI_LONG, MPI_COMM_WORLD);
  MPI_Comm survivors = MPI_COMM_NULL;  // for the end of the run only: plain MPI, no fault in it
  MPI_Comm_split(MPI_COMM_WORLD, is_victim ? MPI_UNDEFINED : 0, run.rank, &survivors);
  std::printf("fault: pid %ld\n", pid);
  const std::string victim = std::to_string(run.victim);
  bool victim_lives = true, stopped = false;
  const fluxcpp_status_t kOk = FLUXCPP_SUCCESS, kTimeout_ = FLUXCPP_ERROR_TIMEOUT;
  const fluxcpp_status_t kArg = FLUXCPP_ERROR_INVALID_ARGUMENT;
  const fluxcpp_context_config_t cfg = config();
  fluxcpp_context_t ctx = nullptr;
  auto make_ctx = [&] { return fluxcpp_context_create(MPI_COMM_WORLD, &cfg, &ctx); };
  auto destroy_ctx = [&] { return fluxcpp_context_destroy(ctx); };

  if (scenario == "bootstrap") {
    victim_lives = false;
    set_env("FLUXCPP_TEST_FAULT", "bootstrap:" + victim + ":kill");
    Op op = make_op("ag_gemm", W);
    expect(run, "context create", kOk, false, make_ctx);
    expect(run, "ag_gemm create", kTimeout_, true, [&] { return op.create(ctx); });
    expect(run, "context destroy (broken: local)", kOk, false, destroy_ctx);
  } else if (scenario == "null_ctx_create" || scenario == "skip_create") {
    // null_ctx_create: the victim then stays away from the context for longer than the
    // timeout (TIMEOUT on the others). skip_create: it goes straight on to destroy the context,
    // so its destroy token meets the others' create check-in: INVALID_USAGE naming it, at once.
    const bool skip = scenario == "skip_create";
    Op op = make_op("ag_gemm", W);
    expect(run, "context create", kOk, false, make_ctx);
    if (!is_victim) {
      expect(run, "ag_gemm create", skip ? FLUXCPP_ERROR_INVALID_USAGE : kTimeout_, true,
             [&] { return op.create(ctx); });
    } else if (!skip) {
      expect(run, "ag_gemm create on a NULL context", kArg, false,
             [&] { return op.create(nullptr); });
      usleep(static_cast<useconds_t>((kTimeout + 1.0) * 1e6));
    }
    // The others' context broke (an op create failed midway): their destroy is local; the
    // victim's is a check-in nobody answers, bounded by the timeout.
    if (is_victim)
      expect_returns(run, "context destroy", destroy_ctx);
    else
      expect(run, "context destroy (broken: local)", kOk, false, destroy_ctx);
  } else if (scenario == "comm_null") {
    if (is_victim) {
      expect(run, "context create on MPI_COMM_NULL", kArg, false,
             [&] { return fluxcpp_context_create(MPI_COMM_NULL, &cfg, &ctx); });
      run.check(ctx == nullptr, "a failed create left a handle");
    } else {
      expect(run, "context create", kTimeout_, false, make_ctx);
      run.check(ctx == nullptr, "a failed create left a handle");
    }
  } else if (scenario == "skip_destroy") {
    Op op = make_op("ag_gemm", W);
    expect(run, "context create", kOk, false, make_ctx);
    expect(run, "ag_gemm create", kOk, false, [&] { return op.create(ctx); });
    expect(run, "ag_gemm forward", kOk, false, op.forward);
    expect(run, "ag_gemm destroy", kOk, false, op.destroy);
    if (!is_victim) expect(run, "context destroy", kTimeout_, true, destroy_ctx);
  } else if (scenario == "forward" && argc == 5) {
    const std::string name = argv[2], action = argv[3], offload = argv[4];
    victim_lives = false;
    stopped = action == "stop";
    set_env("FLUXCPP_TEST_FAULT", "forward:" + victim + ":" + action + ":2");
    set_env("FLUXCPP_COPY_OFFLOAD", offload);
    Op op = make_op(name, W);
    expect(run, "context create", kOk, false, make_ctx);
    expect(run, (name + " create").c_str(), kOk, false, [&] { return op.create(ctx); });
    expect(run, (name + " forward 1").c_str(), kOk, false, op.forward);
    expect(run, (name + " forward 2").c_str(), kTimeout_, true, op.forward);
    expect(run, (name + " forward 3 (broken)").c_str(), FLUXCPP_ERROR_INVALID_USAGE, false,
           op.forward);
    expect(run, (name + " destroy (broken: local)").c_str(), kOk, false, op.destroy);
    // The context itself is not broken (a forward breaks its op only): its destroy is the
    // collective check-in, which the victim misses.
    expect(run, "context destroy", kTimeout_, true, destroy_ctx);
  } else {
    std::fprintf(stderr, "fault: unknown scenario %s\n", scenario.c_str());
    _exit(2);
  }

  if (run.rank == 0) std::printf("fault: expect %d PASS\n", victim_lives ? W : W - 1);
  std::printf("fault: rank %d %s%s\n", run.rank, run.fails.empty() ? "PASS" : "FAIL ",
              run.fails.c_str());
  std::fflush(stdout);
  // Leave together (mpirun ends the job when a rank exits without MPI_Finalize): everyone when
  // the victim lives, else the survivors, who then end a stopped victim.
  if (victim_lives) {
    MPI_Finalize();
    std::printf("fault: rank %d finalized\n", run.rank);
    std::fflush(stdout);
  } else if (survivors != MPI_COMM_NULL) {
    MPI_Barrier(survivors);
    if (stopped && run.rank == 0) kill(static_cast<pid_t>(pids[run.victim]), SIGKILL);
  }
  _exit(0);
}
