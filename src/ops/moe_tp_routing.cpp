#include "ops/moe_tp_routing.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "error_util.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/options.hpp"

namespace fluxcpp::ops {

namespace {

// FNV-1a over 64-bit words, finished with a mix: ranks that read different routings get
// different values (the handshake compares them).
struct Hasher {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(uint64_t v) {
    h ^= v;
    h *= 0x100000001b3ull;
  }
  uint64_t done() const {
    uint64_t z = h;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

}  // namespace

void check_moe_tp_create(const comm::Parts& c, const char* op, const MoeTpOptions& o,
                         const std::string& local_error) {
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  // Index arrays are int32 (T·K <= INT32_MAX); BLAS sizes are int.
  agree_options(
      c, op, local_error,
      {dtype("input_dtype", o.input_dtype), dtype("output_dtype", o.output_dtype),
       dim("hidden", o.hidden, INT32_MAX), dim("ffn_shard", o.ffn_shard, INT32_MAX),
       dim("topk", o.topk, INT32_MAX), dim("num_experts", o.num_experts, INT32_MAX),
       count("max_tokens", o.max_tokens), dim("ep_size", o.ep_size),
       same("transpose_weight", o.transpose_weight ? 1 : 0)},
      [&] {
        FLUXCPP_CHECK_ARG(valid_gemm_dtypes(o.input_dtype, o.output_dtype),
                          "{}: (input, output) dtypes ({}, {}) are not one of (f32, f32), (f64, "
                          "f64), (bf16, bf16), (bf16, f32) (rank {})",
                          op, dtype_name(o.input_dtype), dtype_name(o.output_dtype), r);
        FLUXCPP_CHECK_ARG(W % o.ep_size == 0 && o.num_experts % o.ep_size == 0,
                          "{}: ep_size={} must divide the world size {} and num_experts={} (rank "
                          "{})",
                          op, o.ep_size, W, o.num_experts, r);
        FLUXCPP_CHECK_ARG(
            o.max_tokens <= INT32_MAX / o.topk &&
                o.max_tokens * o.topk <= (int64_t{1} << 40) / std::max(o.hidden, o.ffn_shard) &&
                o.num_experts <= (int64_t{1} << 40) / (o.hidden * o.ffn_shard),
            "{}: max_tokens={}, topk={}, hidden={}, ffn_shard={}, num_experts={} are too "
            "large (T·K must fit int32, the buffers must be addressable)",
            op, o.max_tokens, o.topk, o.hidden, o.ffn_shard, o.num_experts);
      });
}

MoeTpRouting::MoeTpRouting(const char* op, const MoeTpOptions& o, int world_size, int rank)
    : op_(op),
      K_(o.topk),
      E_(o.num_experts),
      L_(o.num_experts / o.ep_size),
      tp_(world_size / o.ep_size),
      q_(rank / (world_size / o.ep_size)),
      W_(world_size),
      rank_(rank) {
  P_.assign(static_cast<std::size_t>(E_) + 1, 0);
  by_src_.resize(static_cast<std::size_t>(W_));
}

int64_t MoeTpRouting::row_begin(int rank) const {
  return P_[(rank / tp_) * L_];
}

int64_t MoeTpRouting::rows(int rank) const {
  const int64_t q = rank / tp_;
  return P_[(q + 1) * L_] - P_[q * L_];
}

std::string MoeTpRouting::load(int64_t T, const int64_t* splits, const int32_t* scatter_index,
                               const float* weights) {
  const int r = rank_;
  if (T > 0 && splits == nullptr) return fmt::format("{}: splits is NULL (rank {})", op_, r);
  if (T > 0 && scatter_index == nullptr)
    return fmt::format("{}: scatter_index is NULL with num_tokens={} (rank {})", op_, T, r);
  T_ = T;
  for (auto& v : by_src_) v.clear();
  expert_of_.clear();
  if (T == 0) return {};
  const int64_t slots = T * K_;
  int64_t M = 0;
  for (int64_t e = 0; e < E_; ++e) {
    const int64_t s = splits[e];
    if (s < 0 || s > slots - M)
      return fmt::format("{}: splits[{}]={} is negative or takes the total past T·K={} (rank {})",
                         op_, e, s, slots, r);
    P_[e + 1] = P_[e] + s;
    M += s;
  }
  // scatter_index: values in [-1, M), every j in [0, M) exactly once.
  seen_.assign(static_cast<std::size_t>(M), 0);
  for (int64_t i = 0; i < slots; ++i) {
    const int32_t j = scatter_index[i];
    if (j < -1 || j >= M)
      return fmt::format("{}: scatter_index[{}][{}]={} is outside [-1, M={}) (rank {})", op_,
                         i / K_, i % K_, j, M, r);
    if (j < 0) continue;
    if (seen_[j] != 0)
      return fmt::format("{}: scatter_index names row {} twice (second at [{}][{}]) (rank {})", op_,
                         j, i / K_, i % K_, r);
    seen_[j] = 1;
  }
  const int64_t routed = std::count(seen_.begin(), seen_.end(), 1);
  if (routed != M)
    return fmt::format(
        "{}: scatter_index covers {} of the M={} rows that splits add up to (rank {})", op_, routed,
        M, r);
  Hasher h, hw;
  h.add(static_cast<uint64_t>(T));
  for (int64_t e = 0; e < E_; ++e) h.add(static_cast<uint64_t>(splits[e]));
  for (int64_t i = 0; i < slots; ++i) h.add(static_cast<uint32_t>(scatter_index[i]));
  if (weights != nullptr)
    for (int64_t i = 0; i < slots; ++i) {
      if (scatter_index[i] < 0) continue;  // weights of unrouted slots are not read
      uint32_t bits;
      std::memcpy(&bits, &weights[i], sizeof bits);
      hw.add(static_cast<uint64_t>(i) << 32 | bits);
    }
  hash_ = h.done();
  weights_hash_ = weights != nullptr ? hw.done() : 0;

  // This rank's rows: their local expert, and their slots grouped by the token's source rank.
  const int64_t b = row_begin(r), Mr = rows(r), per = T / W_;
  expert_of_.resize(static_cast<std::size_t>(Mr));
  for (int64_t l = 0; l < L_; ++l)
    for (int64_t j = expert_begin(l); j < expert_end(l); ++j)
      expert_of_[j - b] = static_cast<int32_t>(l);
  for (int64_t i = 0; i < slots; ++i) {
    const int64_t j = scatter_index[i];
    if (j < b || j >= b + Mr) continue;
    const int64_t t = i / K_;
    by_src_[t / per].push_back(
        {static_cast<int32_t>(t), static_cast<int32_t>(i % K_), static_cast<int32_t>(j - b)});
  }
  return {};
}

std::string check_agreed_routing(const comm::Parts& c, const char* op, const Handshake& hs) {
  static const char* const kWhat[kMoeTpVector] = {"the routing (splits and scatter_index)",
                                                  "routing_weights (the routed slots' weights)"};
  const int64_t* ref = hs.vector(0);
  for (int s = 1; s < c.topo().world_size(); ++s) {
    const int64_t* v = hs.vector(s);
    for (int i = 0; i < kMoeTpVector; ++i)
      if (v[i] != ref[i])
        return fmt::format(
            "{}: ranks passed different {}: rank {} and rank 0 differ (hashes {:#x} and {:#x}); "
            "they must be identical on every rank",
            op, kWhat[i], s, static_cast<uint64_t>(v[i]), static_cast<uint64_t>(ref[i]));
  }
  return {};
}

void bucket_by_expert(const std::vector<RoutedSlot>& slots, std::size_t begin, std::size_t end,
                      const MoeTpRouting& routing, std::vector<int32_t>& order,
                      std::vector<int64_t>& first) {
  const int64_t L = routing.num_local_experts();
  first.assign(static_cast<std::size_t>(L) + 1, 0);
  for (std::size_t i = begin; i < end; ++i) ++first[routing.expert_of(slots[i].row) + 1];
  for (int64_t l = 0; l < L; ++l) first[l + 1] += first[l];
  order.resize(end - begin);
  std::vector<int64_t> next(first.begin(), first.end() - 1);
  for (std::size_t i = begin; i < end; ++i)
    order[next[routing.expert_of(slots[i].row)]++] = static_cast<int32_t>(i);
}

}  // namespace fluxcpp::ops
