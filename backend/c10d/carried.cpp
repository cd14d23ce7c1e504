// The calls whose data is assembled to travel with the call check (ProcessGroupFluxcpp::Carry).
#include <cstring>
#include <numeric>

#include "process_group.hpp"
#include "tensor_args.hpp"

namespace fluxcpp::backend {

auto ProcessGroupFluxcpp::carry_reduce_scatter(const at::Tensor& in, const at::Tensor& out,
                                               const Reduction& r) -> Carry {
  Carry c;
  std::vector<int> order = coll_->reduce_scatter_order(r.scalar, r.reduce);
  if (order.empty()) return c;
  c.data = bytes_of(in);
  c.bytes = nbytes(in);
  const int64_t block = nbytes(out);
  c.finish = [this, out, r, block, order](const std::vector<const char*>& blocks) {
    if (r.count == 0) return;
    std::vector<const void*> mine;
    for (int s : order) mine.push_back(blocks[s] + block * rank_);
    reduce_blocks(r.scalar, r.reduce, mine.data(), size_, r.count, bytes_of(out), size_);
  };
  return c;
}

// A small all_to_all_single travels with the call check whole: every rank's send and receive
// sizes, then its input. Every rank then holds every rank's sizes and checks every pair (the same
// verdict everywhere) before it takes its blocks.
auto ProcessGroupFluxcpp::carry_all_to_all(const at::Tensor& in, const at::Tensor& out,
                                           const std::vector<int64_t>& send,
                                           const std::vector<int64_t>& recv) -> Carry {
  const std::size_t head = 2 * static_cast<std::size_t>(size_) * sizeof(int64_t);
  const int64_t sent = std::accumulate(send.begin(), send.end(), int64_t{0});
  Carry c;
  // At most kCarryBytes, across hosts too: every rank's whole input travels to every rank, W
  // times what the call needs (a 64 KiB one took 196 µs carried in the 128 KiB class across two
  // hosts, 123-262 µs in its own exchange).
  if (head + static_cast<std::size_t>(sent) > static_cast<std::size_t>(CallCheck::kCarryBytes))
    return c;
  c.owned.resize(head + static_cast<std::size_t>(sent));
  std::memcpy(c.owned.data(), send.data(), head / 2);
  std::memcpy(c.owned.data() + head / 2, recv.data(), head / 2);
  if (sent > 0) std::memcpy(c.owned.data() + head, bytes_of(in), static_cast<std::size_t>(sent));
  c.data = c.owned.data();
  c.bytes = static_cast<int64_t>(c.owned.size());
  c.coarse = true;  // uneven splits: ranks of near sizes share a class more often
  c.finish = [this, out, head](const std::vector<const char*>& blocks) {
    const int W = size_;
    auto sizes = [&](int r, int which) {  // which 0: rank r's send sizes, 1: its receive sizes
      std::vector<int64_t> v(static_cast<std::size_t>(W));
      std::memcpy(v.data(), blocks[r] + which * (head / 2), head / 2);
      return v;
    };
    std::vector<std::vector<int64_t>> sends(W), recvs(W);
    for (int r = 0; r < W; ++r) sends[r] = sizes(r, 0), recvs[r] = sizes(r, 1);
    for (int s = 0; s < W; ++s)
      for (int t = 0; t < W; ++t)
        if (sends[s][t] != recvs[t][s])
          throw Failure(FLUXCPP_ERROR_INVALID_ARGUMENT,
                        "fluxcpp backend: all_to_all: rank " + std::to_string(s) + " sends " +
                            std::to_string(sends[s][t]) + " bytes to rank " + std::to_string(t) +
                            ", which expects " + std::to_string(recvs[t][s]) +
                            " from it. Nothing was sent; the group stays usable.");
    int64_t at = 0;
    for (int s = 0; s < W; ++s) {
      const int64_t off = std::accumulate(sends[s].begin(), sends[s].begin() + rank_, int64_t{0});
      if (recvs[rank_][s] > 0)
        std::memcpy(bytes_of(out) + at, blocks[s] + head + off,
                    static_cast<std::size_t>(recvs[rank_][s]));
      at += recvs[rank_][s];
    }
  };
  return c;
}

}  // namespace fluxcpp::backend
