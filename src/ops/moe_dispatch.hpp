// MoE dispatch (private part). See include/fluxcpp/moe_dispatch.hpp for the contract and
// docs/ops/moe_dispatch.md for the algorithm.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/moe_dispatch.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/moe_routing.hpp"

namespace fluxcpp::detail {

class MoeDispatchImpl : public ops::OpBase<MoeDispatchOptions> {
 public:
  static constexpr const char* kOp = "moe_dispatch";
  // Flags a rank publishes with its counts.
  static constexpr uint64_t kHasWeights = 1, kWantsWeights = 2, kWantsSrc = 4, kNoRecv = 8;
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // local_error: a problem the C layer found (e.g. a NULL num_recv_rows), failing every rank.
  int64_t forward(const MoeDispatchInput& in, const MoeDispatchOutput& out,
                  const std::string& local_error = {});

  // The same call, receiving expert by expert: on_expert(l) runs as soon as every row of local
  // expert l is in recv (its own rows first), while later experts' rows may still be arriving.
  // Internal: measures whether dispatch + grouped GEMM gains from starting each expert's GEMM
  // early (docs/ops/moe_dispatch.md).
  using ExpertReady = std::function<void(int64_t l)>;
  int64_t forward_by_expert(const MoeDispatchInput& in, const MoeDispatchOutput& out,
                            const ExpertReady& on_expert);

 private:
  std::string validate(const MoeDispatchInput& in, const MoeDispatchOutput& out) const;
  // Run on every rank after the handshake: reads every rank's counts and flags, writes this
  // rank's counts, returns the agreed verdict (overflow, missing weights, missing recv).
  std::string agree(const MoeDispatchOutput& out);
  int64_t call(const MoeDispatchInput& in, const MoeDispatchOutput& out,
               const std::string& local_error, const ExpertReady& on_expert);
  void run(const MoeDispatchInput& in, const MoeDispatchOutput& out, const ExpertReady& on_expert);
  // Rank s's flags word of the current call.
  uint64_t flags_of(int s) const;
  bool meta_for(int t) const;  // rank t wants (t, k, weight) with its rows
  void pack(int t, const MoeDispatchInput& in);
  void unpack_rows(int s, int64_t l, const ops::Inbox& box, const MoeDispatchOutput& out);
  void unpack_meta(int s, const ops::Inbox& box, const MoeDispatchOutput& out);
  void own_rows(const MoeDispatchInput& in, const MoeDispatchOutput& out);

  int64_t L_ = 1;         // experts per rank
  std::size_t row_ = 0;   // bytes per row
  ops::A2aExchange a2a_;  // a2a-out: this rank's packed blocks, one per destination
  ops::MoeRouting routing_;
  // This rank's own table of the current call.
  std::vector<int64_t> counts_, prefix_;
  std::vector<int32_t> gather_, topk_index_;
  std::vector<int64_t> vector_;                        // published: counts [E], flags, num_tokens
  ops::BlockTable blocks_;  // the current call's block sizes and offsets
};

}  // namespace fluxcpp::detail
