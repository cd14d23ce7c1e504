// GemmGroupedV3 (private part). See include/fluxcpp/grouped_gemm.hpp for the contract and
// docs/ops/grouped_gemm.md for the schedule.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/grouped_gemm.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::detail {

class GroupedGemmImpl {
 public:
  // Local: raises on this rank only. local_error: a problem the C layer found (e.g. a NULL
  // out-pointer), raised as kInvalidArgument.
  GroupedGemmImpl(const std::shared_ptr<ContextImpl>& ctx, const GroupedGemmOptions& options,
                  const std::string& local_error = {});

  void forward(const void* input, const int64_t* splits, const void* weight, const float* scale,
               void* output);
  const GroupedGemmOptions& options() const { return opts_; }
  static constexpr const char* kOp = "grouped_gemm";

  // One participant's share of a forward: rows [row0, row1) of the concatenated groups, columns
  // [col0, col1) of every group.
  struct Part {
    int64_t row0, row1, col0, col1;
  };
  // The shares of a forward over m rows with `threads` participants available (pure function of
  // its arguments, exposed for the tests).
  static std::vector<Part> plan(int64_t m, int64_t n, int threads);

 private:
  // Checks the forward's arguments and fills offsets_ (P[0..G]); returns m.
  int64_t validate(const void* input, const int64_t* splits, const void* weight,
                   const void* output);
  void run_part(const Part& p, kernels::GemmWeight& w, const char* input, const char* weight,
                const float* scale, char* output) const;

  std::shared_ptr<const comm::Parts> ctx_;  // keeps the context alive (comm::parts_of)
  GroupedGemmOptions opts_;
  std::size_t in_elem_ = 0, out_elem_ = 0;    // bytes per element of input/weight and output
  std::vector<int64_t> offsets_;              // P[g], G + 1 entries, of the current forward
  std::vector<kernels::GemmWeight> weights_;  // one per participant (bf16 slabs widened there)
};

}  // namespace fluxcpp::detail
