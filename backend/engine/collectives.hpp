// Collectives on raw buffers over one fluxcpp context: what the torch.distributed backend runs,
// built from the library's ops (AllReduce, ReduceScatter, AllGather, AllToAllSingle) with the
// ops cached by type and grown collectively when a larger call comes. Blocking; one thread at a
// time (the context's rule). Every rank must make the same calls in the same order with the same
// sizes, as torch.distributed requires: a disagreement is the ops' error on every rank, or, when
// it makes one rank grow an op that another does not, a timeout on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "call_check.hpp"
#include "capi_call.hpp"
#include "scalar.hpp"

namespace fluxcpp::backend {

class Collectives {
 public:
  // Takes ownership of ctx (a fluxcpp_context_t of `size` ranks, this one `rank`).
  Collectives(fluxcpp_context_t ctx, int rank, int size);
  ~Collectives();  // local: drops the ops
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  fluxcpp_context_t context() const { return ctx_; }

  // Every rank's call is `spec` (call_check.hpp): the first step of each backend call.
  void agree(const CallSpec& spec) { calls_->agree(spec); }
  // The most a call's data carried with the check may be (CallCheck::carry_max).
  int64_t carry_max() const { return calls_->carry_max(); }
  // agree, with a small call's data beside the records (CallCheck::agree_carrying): rank t's
  // bytes at [t].
  const std::vector<const char*>& agree_carrying(const CallSpec& spec, const void* data,
                                                 int64_t bytes, bool coarse = false) {
    return calls_->agree_carrying(spec, data, bytes, coarse);
  }

  // Whether reduce_blocks over every rank's block in rank order gives all_reduce's bits: always
  // but for the native sums across hosts of several ranks, which AllReduce adds host by host.
  bool rank_order(Scalar s, Reduce r) const;
  // The order in which reduce_scatter adds the ranks' blocks for this rank (reduce_blocks over
  // them in it gives reduce_scatter's bits), or empty across hosts of several ranks (native sums:
  // ReduceScatter adds host by host). Native sums on one host: ReduceScatter's ring, r-1, r-2,
  // ..., r; hosts of one rank each, and every other reduction: rank order.
  std::vector<int> reduce_scatter_order(Scalar s, Reduce r) const;
  // out = in reduced over ranks (count elements; in may equal out). Sums of f32/bf16/f64 run on
  // AllReduce's fixed order; everything else gathers the blocks and reduces them in rank order.
  void all_reduce(Scalar s, Reduce r, const void* in, void* out, int64_t count);
  // out [size * count] elements of `s`: rank t's input at t * count.
  void reduce_scatter(Scalar s, Reduce r, const void* in, void* out, int64_t count);
  // out: size blocks of `bytes`, rank t's at t * bytes.
  void all_gather(const void* in, int64_t bytes, void* out);
  // send[t] bytes from in at prefix(send) to rank t; recv[s] bytes from rank s into out at
  // prefix(recv). send[t] on rank s must equal recv[s] on rank t. bound: the same on every rank,
  // at least any rank's sum of sent or received bytes; -1: not known (agreed first, one small
  // gather more).
  void all_to_all(const void* in, const int64_t* send, void* out, const int64_t* recv,
                  int64_t bound = -1);
  void broadcast(void* data, int64_t bytes, int root);
  // Root's `out` gets size blocks of `bytes` (rank t's at t * bytes); out unused elsewhere.
  void gather(const void* in, int64_t bytes, void* out, int root);
  // Root's `in` holds size blocks of `bytes`; every rank gets its block in out.
  void scatter(const void* in, int64_t bytes, void* out, int root);
  void barrier();
  // A buffer of at least `bytes` for the caller's own staging (packing a tensor list), reused
  // from call to call: valid until the next staging() call; never used by the calls above.
  char* staging(std::size_t bytes) { return scratch(bytes, 3); }

 private:
  struct Op {
    void* handle = nullptr;
    int64_t capacity = 0;
  };
  void* all_reduce_op(Scalar s, int64_t count);
  void* reduce_scatter_op(Scalar s, int64_t count);
  void* all_gather_op(int64_t units);
  void* all_to_all_op(int64_t units);
  void drop(int kind, Op& op);
  void broadcast_tree(void* data, int64_t bytes, int root);
  char* scratch(std::size_t bytes, int which);

  fluxcpp_context_t ctx_;
  int rank_, size_;
  int host_size_ = 1;
  std::unique_ptr<CallCheck> calls_;
  std::map<std::pair<int, int>, Op> ops_;  // (kind, dtype) -> op
  std::vector<char> scratch_[4];
};

}  // namespace fluxcpp::backend
