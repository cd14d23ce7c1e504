// What the two tensor-parallel MoE ops (ag_scatter_grouped_gemm, grouped_gemm_gather_rs) share:
// the create-time checks of MoeTpOptions, and one forward's routing — splits and scatter_index
// checked on this rank, hashed for the handshake (so ranks that pass different routings fail
// alike), and turned into the row lists the ops walk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/moe_tp_options.hpp"
#include "ops/core/handshake.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::ops {

// Collective: the checks every rank runs on its options (dtypes, sizes, ep_size dividing W and
// E), then every rank must have passed the same values. Raises the same Error on every rank.
void check_moe_tp_create(const comm::Parts& c, const char* op, const MoeTpOptions& o,
                         const std::string& local_error);

// One slot routed to a row of this rank: token t (global), k, and its row j - b in this rank's
// rows.
// A call of a MoE tensor-parallel op (ag_scatter_grouped_gemm, grouped_gemm_gather_rs), on any
// of its paths.
struct MoeTpCall {
  const char* input;
  int64_t T;  // tokens (all ranks')
  const int64_t* splits;
  const int32_t* scatter;
  const void* weight;
  // ag_scatter_grouped_gemm: the per-expert scale [L]; grouped_gemm_gather_rs: the routing
  // weights [T, topk].
  const float* factors;
  char* output;
  char* gathered = nullptr;  // ag_scatter_grouped_gemm: the gathered input, or NULL
};

// How a call of either op runs, chosen by MoeTpRouting::plan from the routed rows (the agreed
// routing) and the shape: the same schedule, and so the split into GEMM calls and the bits, on
// every call with the same routing. gemm-only runs the kind's GEMMs on what the buffers hold;
// comm-only the op's data movement, the same for both kinds.
struct MoeTpSchedule {
  enum class Kind {
    kAllRows,  // every row's GEMMs in one pass, one per expert (ag_scatter_grouped_gemm: once every
               // block with rows here has landed; grouped_gemm_gather_rs: before the partials)
    kByRank,   // rank by rank: ag_scatter_grouped_gemm source by source as the blocks land (own
               // first, another host's in pieces), grouped_gemm_gather_rs destination by
               // destination, each partial published when done
  };
  Kind kind = Kind::kAllRows;
  Path path = Path::kFused;  // which steps run: all, the GEMMs, the data movement
};

struct RoutedSlot {
  int32_t t;
  int32_t k;
  int32_t row;
};

class MoeTpRouting {
 public:
  MoeTpRouting() = default;
  MoeTpRouting(const char* op, const MoeTpOptions& o, int world_size, int rank);

  // Checks one forward's routing on this rank and derives the tables. Returns "" or the message
  // (op, argument, values, rank). `weights` (may be null) only joins the hash: entries of routed
  // slots, as bits.
  std::string load(int64_t T, const int64_t* splits, const int32_t* scatter_index,
                   const float* weights);

  // Of the last successful load:
  uint64_t hash() const { return hash_; }
  uint64_t weights_hash() const { return weights_hash_; }
  int64_t row_begin(int rank) const;  // b_s
  int64_t rows(int rank) const;       // M_s
  int64_t rows() const { return rows(rank_); }
  int64_t tokens_per_rank() const { return T_ / W_; }
  // P[q·L + l]: the first global row of local expert l of this rank.
  int64_t expert_begin(int64_t l) const { return P_[q_ * L_ + l]; }
  int64_t expert_end(int64_t l) const { return P_[q_ * L_ + l + 1]; }
  // This rank's local expert of its row i (i = j - b).
  int32_t expert_of(int64_t i) const { return expert_of_[i]; }
  // This rank's routed slots whose token belongs to world rank s, by (t, k).
  const std::vector<RoutedSlot>& slots_from(int s) const { return by_src_[s]; }
  int64_t num_local_experts() const { return L_; }

  // Rows per local expert and rank from which a call's GEMMs go rank by rank (MoeTpSchedule).
  static constexpr int64_t kPieceRows = 128;
  // Whether a call with `rows` routed rows on this rank goes rank by rank: when a local expert
  // gets about kPieceRows rows or more per rank. Below that each split costs the GEMM engine more
  // (every call re-blocks its expert's weight) than the earlier start wins. A function of the
  // routing and the shape: the same GEMM calls on every call with the same routing.
  bool by_rank(int64_t rows) const { return rows >= static_cast<int64_t>(W_) * L_ * kPieceRows; }
  // The schedule of a call on `path` with `rows` routed rows on this rank.
  MoeTpSchedule plan(Path path, int64_t rows) const {
    return {by_rank(rows) ? MoeTpSchedule::Kind::kByRank : MoeTpSchedule::Kind::kAllRows, path};
  }

 private:
  const char* op_ = "";
  int64_t K_ = 0, E_ = 0, L_ = 0, tp_ = 1, q_ = 0, T_ = 0;
  int W_ = 1, rank_ = 0;
  std::vector<int64_t> P_;                       // [E + 1]
  std::vector<int32_t> expert_of_;               // [M_r]
  std::vector<std::vector<RoutedSlot>> by_src_;  // [W]
  std::vector<unsigned char> seen_;              // [M] scratch of the permutation check
  uint64_t hash_ = 0, weights_hash_ = 0;
};

// The routing hashes published in a call's handshake (its vector, kMoeTpVector values): after the
// handshake every rank compares every rank's with rank 0's, so a disagreement is the same
// INVALID_ARGUMENT on every rank, naming the ranks and what differs.
inline constexpr int kMoeTpVector = 2;  // the routing hash, the routing weights' hash
std::string check_agreed_routing(const comm::Parts& c, const char* op, const Handshake& hs);

// Buckets `slots` by local expert (stable): on return `order` lists indices into slots, expert
// by expert, and first[l]..first[l+1] is expert l's range. `expert(slot)` gives a slot's expert.
void bucket_by_expert(const std::vector<RoutedSlot>& slots, std::size_t begin, std::size_t end,
                      const MoeTpRouting& routing, std::vector<int32_t>& order,
                      std::vector<int64_t>& first);

}  // namespace fluxcpp::ops
