// oneCCL's CPU allreduce / allgather / reduce_scatter on the tensors of scripts/bench_peers.py:
// one process per rank, started by that script (not by MPI), the communicator made from a key
// value store whose address rank 0 writes into a file the others read. Built by
// scripts/bench_peers.sh against PyPI's oneccl-cpu-devel (headers and static libccl.a) into
// build/peers; never part of the library.
//
// Usage: oneccl_bench RANK WORLD KVS_FILE DTYPES MAX_BYTES ROUNDS
// Prints, on rank 0, one JSON line per op, dtype and size:
//   {"peer": "oneccl", "op", "dtype", "bytes", "world", "us", "ok", "wrong"}
// "us" is the median over ROUNDS of the slowest rank's mean time of one call; "ok" is whether
// every rank's output equalled the closed-form sum (the inputs are exact in bf16, so any order
// of summation gives the same bits).
#include <oneapi/ccl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// bench_peers.py's pattern: rank r, element i holds ((i % 17) + r + 1) / 4.
float pattern(int rank, size_t i) { return float((i % 17) + rank + 1) * 0.25f; }

uint16_t to_bf16(float f) {  // exact for the pattern's values: truncation loses nothing
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Buffer {
  bool bf16;
  std::vector<float> f;
  std::vector<uint16_t> h;
  Buffer(bool is_bf16, size_t n) : bf16(is_bf16) {
    if (bf16) h.assign(n, 0); else f.assign(n, 0.f);
  }
  void* data() { return bf16 ? static_cast<void*>(h.data()) : static_cast<void*>(f.data()); }
  void set(size_t i, float v) { if (bf16) h[i] = to_bf16(v); else f[i] = v; }
  float get(size_t i) const { return bf16 ? from_bf16(h[i]) : f[i]; }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: oneccl_bench RANK WORLD KVS_FILE DTYPES MAX_BYTES ROUNDS\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]);
  const std::string kvs_file = argv[3];
  const auto dtypes = split(argv[4]);
  const size_t max_bytes = std::strtoull(argv[5], nullptr, 10);
  const int rounds = std::atoi(argv[6]);

  ccl::init();
  ccl::shared_ptr_class<ccl::kvs> kvs;
  ccl::kvs::address_type addr;
  if (rank == 0) {
    kvs = ccl::create_main_kvs();
    addr = kvs->get_address();
    const std::string tmp = kvs_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(addr.data()),
                                               std::streamsize(addr.size()));
    std::rename(tmp.c_str(), kvs_file.c_str());  // the others never read half an address
  } else {
    for (int tries = 0;; ++tries) {
      std::ifstream in(kvs_file, std::ios::binary);
      if (in && in.read(reinterpret_cast<char*>(addr.data()), std::streamsize(addr.size()))) break;
      if (tries > 60000) { std::fprintf(stderr, "rank %d: no kvs address\n", rank); return 1; }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kvs = ccl::create_kvs(addr);
  }
  auto comm = ccl::create_communicator(world, rank, kvs);

  const std::vector<size_t> all_sizes = {4, 64, 1 << 10, 16 << 10, 64 << 10, 256 << 10,
                                         1 << 20, 4 << 20, 16 << 20, 64 << 20};
  for (const auto& dname : dtypes) {
    const bool bf16 = dname == "bf16";
    const auto dt = bf16 ? ccl::datatype::bfloat16 : ccl::datatype::float32;
    const size_t esize = bf16 ? 2 : 4;
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      for (size_t nbytes : all_sizes) {
        if (nbytes > max_bytes) continue;
        const size_t n = std::max<size_t>(1, nbytes / esize);
        const std::string o = op;
        // Element counts as scripts/bench_torch_backend.py: all_gather n in, n * W out;
        // reduce_scatter per * W in, per out.
        const size_t per = std::max<size_t>(1, n / world);
        const size_t in_n = o == "reduce_scatter" ? per * world : n;
        const size_t out_n = o == "all_gather" ? n * world : o == "reduce_scatter" ? per : n;
        Buffer in(bf16, in_n), out(bf16, out_n);
        for (size_t i = 0; i < in_n; ++i) in.set(i, pattern(rank, i));
        auto call = [&] {
          if (o == "all_reduce")
            ccl::allreduce(in.data(), out.data(), n, dt, ccl::reduction::sum, comm).wait();
          else if (o == "all_gather")
            ccl::allgather(in.data(), out.data(), n, dt, comm).wait();
          else
            ccl::reduce_scatter(in.data(), out.data(), per, dt, ccl::reduction::sum, comm).wait();
        };
        call();
        size_t wrong = 0;
        for (size_t i = 0; i < out_n; ++i) {
          float want = 0.f;
          if (o == "all_gather") {
            want = pattern(int(i / n), i % n);
          } else {
            const size_t j = o == "reduce_scatter" ? size_t(rank) * per + i : i;
            for (int r = 0; r < world; ++r) want += pattern(r, j);
          }
          wrong += out.get(i) != want;
        }
        // Batches of at least 4 ms, sized as torch_peers.py sizes every other peer's: after
        // 3 untimed calls, batches of 3, 12, 48 ... calls until one lasts 1 ms on the slowest rank.
        for (int i = 0; i < 3; ++i) call();
        long reps = 3;
        for (long k = 3;; k *= 4) {
          const auto w0 = std::chrono::steady_clock::now();
          for (long i = 0; i < k; ++i) call();
          const double tw =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
          double twmax = 0.0;
          ccl::allreduce(&tw, &twmax, 1, ccl::datatype::float64, ccl::reduction::max, comm).wait();
          if (twmax >= 1e-3 || k >= 3000) {
            reps = std::max(3L, std::min(5000L, long(4e-3 * double(k) / twmax) + 1));
            break;
          }
        }
        for (long i = 0; i < reps; ++i) call();  // untimed warm-up, as the Python peers
        std::vector<double> times;
        for (int r = 0; r < rounds; ++r) {
          ccl::barrier(comm);
          const auto t0 = std::chrono::steady_clock::now();
          for (long i = 0; i < reps; ++i) call();
          const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                               .count() / double(reps);
          double tmax = 0.0;
          ccl::allreduce(&t, &tmax, 1, ccl::datatype::float64, ccl::reduction::max, comm).wait();
          times.push_back(tmax * 1e6);
        }
        std::sort(times.begin(), times.end());
        double wrong_all = double(wrong), wrong_sum = 0.0;
        ccl::allreduce(&wrong_all, &wrong_sum, 1, ccl::datatype::float64, ccl::reduction::sum,
                       comm).wait();
        if (rank == 0) {
          std::printf("{\"peer\": \"oneccl\", \"op\": \"%s\", \"dtype\": \"%s\", \"bytes\": %zu, "
                      "\"world\": %d, \"us\": %.3f, \"ok\": %s, \"wrong\": %.0f}\n",
                      op, dname.c_str(), nbytes, world, times[times.size() / 2],
                      wrong_sum == 0.0 ? "true" : "false", wrong_sum);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
