// MoE combine (private part). See include/fluxcpp/moe_combine.hpp for the contract and
// docs/ops/moe_combine.md for the algorithm.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/moe_combine.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/moe_routing.hpp"

namespace fluxcpp::detail {

class MoeCombineImpl : public ops::OpBase<MoeCombineOptions> {
 public:
  static constexpr const char* kOp = "moe_combine";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const MoeCombineInput& in, void* output);

 private:
  std::string validate(const MoeCombineInput& in, const void* output) const;
  // After the handshake, on every rank: every rank's num_rows must be its R_q.
  std::string agree();
  void run(const MoeCombineInput& in, void* output);
  // Owner side: this rank's received rows of source s, back in s's expert-major order.
  void stage(int s, const char* input);

  int64_t L_ = 1;         // experts per rank
  std::size_t row_ = 0;   // bytes per input row
  ops::A2aExchange a2a_;  // a2a-out: this rank's rows for each source
  ops::MoeRouting routing_;
  std::vector<int64_t> counts_, prefix_;
  std::vector<int32_t> scatter_;
  std::vector<const void*> slot_rows_;  // [T·K]: where each slot's row is, or null
  std::vector<int64_t> vector_;         // published: counts [E], num_rows, num_tokens
  ops::BlockTable blocks_;
};

}  // namespace fluxcpp::detail
