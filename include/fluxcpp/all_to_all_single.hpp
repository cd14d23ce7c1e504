// fluxcpp/all_to_all_single.hpp: All2AllSingle — all-to-all of rows with variable per-peer splits
// (like MPI_Alltoallv on rows).
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct AllToAllSingleOptions {
  int64_t max_rows = 0;  // largest row count a forward may send (Σ input_splits) or receive
  int64_t n = 0;         // elements per row
  DType dtype = DType::kFloat32;
};

namespace detail {
class AllToAllSingleImpl;
}

class FLUXCPP_API AllToAllSingle {
 public:
  // Collective: validates (every rank must pass the same options) and allocates the symmetric
  // buffers. Errors are raised on every rank.
  AllToAllSingle(const Context& ctx, const AllToAllSingleOptions& options);
  AllToAllSingle(AllToAllSingle&&) noexcept;
  AllToAllSingle& operator=(AllToAllSingle&&) noexcept;
  ~AllToAllSingle();  // noexcept; never communicates

  // Collective, blocking. input_splits and output_splits have W entries each (rows, >= 0).
  // input [Σ input_splits, n]: the input_splits[t] rows starting at prefix(input_splits)[t] go
  // to rank t. output [Σ output_splits, n]: the rows from rank s start at
  // prefix(output_splits)[s]. Both sums <= max_rows. Rank s's input_splits[r] must equal rank
  // r's output_splits[s]: any mismatch is kInvalidArgument on every rank, naming the pair.
  // input and output may be null only when their row count is 0. Exact (a pure copy).
  void forward(const void* input, const int64_t* input_splits, void* output,
               const int64_t* output_splits);

  // Zero-copy input (not collective): waits until every peer has finished reading this rank's
  // slot for the previous forward (kTimeout naming the peer otherwise) and returns it: room for
  // max_rows rows. Write this call's input there (laid out as `input`) and pass it to forward:
  // forward then skips copying it. Call it again before each write.
  void* input_buffer();

  const AllToAllSingleOptions& options() const;

 private:
  std::unique_ptr<detail::AllToAllSingleImpl> impl_;
};

}  // namespace fluxcpp
