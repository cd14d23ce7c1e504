// A pipeline-parallel forward pass with fluxcpp::AsyncSendRecv, checked against the same network
// on one rank.
//
// The network is W stages, each a small MLP (Linear, ReLU, Linear); rank s holds stage s. A batch
// is split into micro-batches that flow down the line 0 -> 1 -> ... -> W-1: a stage receives
// micro-batch i from the previous stage, computes, and hands its output to the next stage with
// isend, whose copy runs on a comm thread while the stage computes micro-batch i+1 (its output
// buffers rotate, and one is reused only after send_wait). With num_slots slots a stage can run
// that many micro-batches ahead of the next one. The last stage compares every output bit for
// bit with the whole network applied on that rank alone (same code, same order of operations).
//   mpirun -np 4 build/python-free-examples/fluxcpp_example_pipeline [--slots N]
//       [--microbatches M] [--rows B] [--hidden H] [--sweep]
// --sweep times the pipeline with num_slots 1, 2 and 4 and prints micro-batches per second.
#include <fluxcpp/fluxcpp.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Args {
  int slots = 2, microbatches = 16;
  int64_t rows = 64, hidden = 192;
  bool sweep = false;
};

std::vector<float> random_tensor(int64_t count, unsigned seed, float scale) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& x : v) x = scale * static_cast<float>(gen() / 2147483648.0 - 1.0);
  return v;
}

// One stage: y = W2 · relu(W1 · x + b1) + b2, every matrix [hidden, hidden] (Linear layout).
struct Stage {
  std::vector<float> w1, b1, w2, b2;
  Stage(int s, int64_t h)
      : w1(random_tensor(h * h, 100 + s, 0.08f)),
        b1(random_tensor(h, 200 + s, 0.1f)),
        w2(random_tensor(h * h, 300 + s, 0.08f)),
        b2(random_tensor(h, 400 + s, 0.1f)) {}
};

void linear(const float* x, const std::vector<float>& w, const std::vector<float>& b, float* y,
            int64_t m, int64_t h, bool relu) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < h; ++j) {
      float acc = b[j];
      const float* a = x + i * h;
      const float* wr = w.data() + j * h;
      for (int64_t l = 0; l < h; ++l) acc += a[l] * wr[l];
      y[i * h + j] = relu ? std::max(acc, 0.0f) : acc;
    }
}

void stage_forward(const Stage& st, const float* x, float* y, int64_t m, int64_t h,
                   std::vector<float>& tmp) {
  tmp.resize(static_cast<std::size_t>(m * h));
  linear(x, st.w1, st.b1, tmp.data(), m, h, true);
  linear(tmp.data(), st.w2, st.b2, y, m, h, false);
}

// Micro-batch i: rows vary (B, B-5, B-10, ...) so messages differ in size.
int64_t rows_of(int i, int64_t b) {
  return std::max<int64_t>(1, b - (i % 3) * 5);
}

std::vector<float> input_of(int i, int64_t b, int64_t h) {
  return random_tensor(rows_of(i, b) * h, 1000 + i, 1.0f);
}

// Runs the pipeline once; the last stage returns every micro-batch's output.
std::vector<std::vector<float>> run(fluxcpp::AsyncSendRecv& op, const Stage& st, const Args& a,
                                    int r, int W) {
  const int64_t h = a.hidden, b = a.rows;
  const int nbuf = op.options().num_slots + 1;
  std::vector<std::vector<float>> out(nbuf, std::vector<float>(b * h));
  std::vector<uint64_t> seq(nbuf, 0);
  std::vector<float> in(b * h), tmp;
  std::vector<std::vector<float>> results;
  for (int i = 0; i < a.microbatches; ++i) {
    int64_t m = rows_of(i, b);
    if (r == 0) {
      in = input_of(i, b, h);
    } else {
      m = op.recv(r - 1, in.data(), b);
    }
    std::vector<float>& y = out[i % nbuf];
    if (seq[i % nbuf] != 0) op.send_wait(r + 1, seq[i % nbuf]);  // its previous isend
    stage_forward(st, in.data(), y.data(), m, h, tmp);
    if (r < W - 1) {
      seq[i % nbuf] = op.isend(r + 1, y.data(), m);
    } else {
      results.emplace_back(y.begin(), y.begin() + m * h);
    }
  }
  if (r < W - 1)
    for (uint64_t s : seq)
      if (s != 0) op.send_wait(r + 1, s);
  return results;
}

const char kUsage[] =
    "usage: mpirun -np W fluxcpp_example_pipeline [--slots N] [--microbatches M] [--rows B]\n"
    "                                             [--hidden H] [--sweep] [--help]\n"
    "A pipeline-parallel forward pass: W stages (rank s holds stage s, a small MLP),\n"
    "micro-batches passed down the line with fluxcpp::AsyncSendRecv, checked bit for bit on the\n"
    "last rank against the whole network on one rank; rank 0 prints the time and micro-batches\n"
    "per second.\n"
    "  --slots N         messages in flight per pair of stages (default 2)\n"
    "  --microbatches M  micro-batches per run (default 16)\n"
    "  --rows B          rows of the largest micro-batch, at least 16 (default 64)\n"
    "  --hidden H        width of every layer (default 192)\n"
    "  --sweep           run with 1, 2 and 4 slots instead of --slots\n"
    "Exit status 0 when every output matches, nonzero otherwise.\n";

// The arguments; --help prints the usage and exits 0, anything unknown exits 2. Called before
// MPI starts, so --help also works without mpirun.
Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n%s", argv[0], s.c_str(), kUsage);
        std::exit(2);
      }
      return std::atol(argv[++i]);
    };
    if (s == "--help" || s == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (s == "--slots") {
      a.slots = static_cast<int>(next());
    } else if (s == "--microbatches") {
      a.microbatches = static_cast<int>(next());
    } else if (s == "--rows") {
      a.rows = next();
    } else if (s == "--hidden") {
      a.hidden = next();
    } else if (s == "--sweep") {
      a.sweep = true;
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s'\n%s", argv[0], s.c_str(), kUsage);
      std::exit(2);
    }
  }
  a.slots = std::max(1, a.slots);
  a.microbatches = std::max(1, a.microbatches);
  a.rows = std::max<int64_t>(16, a.rows);
  a.hidden = std::max<int64_t>(1, a.hidden);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int r = 0, W = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  int failures = 0;
  try {
    fluxcpp::Context ctx(MPI_COMM_WORLD);
    const Stage stage(r, a.hidden);
    std::vector<int> peers;
    if (r > 0) peers.push_back(r - 1);
    if (r < W - 1) peers.push_back(r + 1);
    std::vector<int> slot_counts{a.slots};
    if (a.sweep) slot_counts = {1, 2, 4};
    for (int slots : slot_counts) {
      fluxcpp::AsyncSendRecvOptions o;
      o.max_m = a.rows;
      o.n = a.hidden;
      o.num_slots = slots;
      o.peers = peers;
      fluxcpp::AsyncSendRecv op(ctx, o);
      run(op, stage, a, r, W);  // warm-up
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      const auto results = run(op, stage, a, r, W);
      double t = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      int wrong = 0;
      if (r == W - 1) {
        // The whole network on this rank alone.
        std::vector<Stage> all;
        for (int s = 0; s < W; ++s) all.emplace_back(s, a.hidden);
        std::vector<float> tmp;
        for (int i = 0; i < a.microbatches; ++i) {
          std::vector<float> x = input_of(i, a.rows, a.hidden), y(x.size());
          for (int s = 0; s < W; ++s) {
            stage_forward(all[s], x.data(), y.data(), rows_of(i, a.rows), a.hidden, tmp);
            std::swap(x, y);
          }
          if (results[i].size() != x.size() ||
              std::memcmp(results[i].data(), x.data(), x.size() * sizeof(float)) != 0) {
            std::printf("micro-batch %d: pipeline output differs from the one-rank network\n", i);
            ++wrong;
          }
        }
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      failures += wrong;
      if (r == 0)
        std::printf(
            "pipeline: %d stages, %d micro-batches of <= %lld rows, hidden %lld, "
            "num_slots %d: %.3f s, %.1f micro-batches/s, %s\n",
            W, a.microbatches, static_cast<long long>(a.rows), static_cast<long long>(a.hidden),
            slots, t, a.microbatches / t, wrong == 0 ? "matches the one-rank network" : "MISMATCH");
      op.close();
    }
    ctx.close();
  } catch (const fluxcpp::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", r, e.what());
    failures = 1;
  }
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
