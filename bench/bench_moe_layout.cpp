// moe_layout (counting pass + placement pass) vs the plain approach it replaces: a stable sort of
// the routed slots by expert, then the index arrays written from the sorted order. Uniform
// routing with a few unrouted slots; E experts over 8 ranks; a single thread per rank.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "bench.hpp"
#include "fluxcpp/moe_layout.hpp"

namespace fluxcpp::bench {

void bench_moe_layout(Env& env) {
  struct Shape {
    int64_t tokens, topk, experts;
  };
  std::vector<Shape> shapes;
  for (int64_t tokens : {4096, 65536})
    for (int64_t topk : {2, 6})
      for (int64_t experts : {8, 64})
        if (!env.settings().quick || (tokens == 4096 && experts == 64))
          shapes.push_back({tokens, topk, experts});
  const int64_t R = 8;
  env.section(
      "moe_layout: counting layout vs stable sort of the slots (1 thread per rank)",
      {"tokens", "topk", "E", "ranks", "moe_layout", "stable sort", "speedup", "Mslots/s", "#bad"});
  for (const Shape& s : shapes) {
    const int64_t T = s.tokens, K = s.topk, E = s.experts, slots = T * K;
    std::vector<int32_t> ids(static_cast<std::size_t>(slots));
    uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(env.rank() + 1);
    for (auto& id : ids) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      id = x % 32 == 0 ? -1 : static_cast<int32_t>((x >> 8) % static_cast<uint64_t>(E));
    }
    std::vector<int64_t> counts(E), rank_rows(R), rank_tokens(R);
    std::vector<int32_t> scatter(slots), gather(slots), topk(slots);
    std::vector<int32_t> ref_scatter(slots), ref_gather(slots), ref_topk(slots), order(slots);
    auto ours = [&] {
      moe_layout(ids.data(), T, K, E, R,
                 {counts.data(), rank_rows.data(), rank_tokens.data(), scatter.data(),
                  gather.data(), topk.data()});
    };
    auto sorted = [&] {
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t p, int32_t q) {
        const uint32_t ep = static_cast<uint32_t>(ids[p]), eq = static_cast<uint32_t>(ids[q]);
        return ep < eq;  // −1 becomes the largest key: unrouted slots sort last
      });
      std::fill(ref_scatter.begin(), ref_scatter.end(), -1);
      std::fill(ref_gather.begin(), ref_gather.end(), -1);
      std::fill(ref_topk.begin(), ref_topk.end(), -1);
      for (int64_t row = 0; row < slots && ids[order[row]] >= 0; ++row) {
        ref_scatter[order[row]] = static_cast<int32_t>(row);
        ref_gather[row] = static_cast<int32_t>(order[row] / K);
        ref_topk[row] = static_cast<int32_t>(order[row] % K);
      }
    };
    const std::vector<Stats> t = env.time_all({ours, sorted});
    ours();
    sorted();
    long bad = static_cast<long>(scatter != ref_scatter) + static_cast<long>(gather != ref_gather) +
               static_cast<long>(topk != ref_topk);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const double to = t[0].median_ms, ts = t[1].median_ms;
    env.row({std::to_string(T), std::to_string(K), std::to_string(E), std::to_string(R), fmt_ms(to),
             fmt_ms(ts), fmt::format("{:.2f}x", ts / to),
             fmt::format("{:.0f}", static_cast<double>(slots) / (to * 1e3)), std::to_string(bad)});
    env.json({{"op", jstr("moe_layout")},
              {"world", jnum(env.world())},
              {"tokens", jnum(static_cast<double>(T))},
              {"topk", jnum(static_cast<double>(K))},
              {"experts", jnum(static_cast<double>(E))},
              {"ranks", jnum(static_cast<double>(R))},
              {"t_fused_ms", jnum(to)},
              {"t_unfused_ms", jnum(ts)},
              {"speedup", jnum(ts / to)},
              {"overlap_eff", "null"},
              {"wrong", jnum(static_cast<double>(bad))}});
  }
}

}  // namespace fluxcpp::bench
