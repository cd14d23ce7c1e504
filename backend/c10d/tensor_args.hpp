// What a torch call's tensors mean to the engine: element type, reduction, checks with
// PyTorch's error style (the call and the argument named, TORCH_CHECK's RuntimeError).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

#include "../engine/call_check.hpp"
#include "../engine/scalar.hpp"

namespace fluxcpp::backend {

// A dense, contiguous CPU tensor; anything else fails naming the call and the argument.
void check_tensor(const at::Tensor& t, const char* call, const char* what);
// Exactly one tensor, checked.
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* call);
// `ts` all of t's dtype and element count (outputs of a gather, inputs of a scatter).
void check_list(const std::vector<at::Tensor>& ts, const at::Tensor& like, int size,
                const char* call, const char* what);
void check_rank(int64_t r, int size, const char* call, const char* what);

// A reduction of t as the engine runs it: complex tensors as pairs of reals (sum and avg only).
struct Reduction {
  Scalar scalar;
  Reduce reduce;
  int64_t count;  // elements of `scalar`
};
Reduction reduction_of(const at::Tensor& t, const c10d::ReduceOp& op, const char* call);

// The element type as torch prints it ("float32", "complex64", ...), for messages.
std::string dtype_name(const at::Tensor& t);

// What every rank's call must agree on (engine/call_check.hpp): the tensor's dtype and element
// count, a ReduceOp, a root; for a list, the tensors, their dtypes (joined when they differ) and
// elements in all.
CallSpec spec_of(const at::Tensor& t, const char* reduce = "", int root = -1);
CallSpec spec_of(const std::vector<at::Tensor>& ts, const char* reduce = "");

int64_t nbytes(const at::Tensor& t);
char* bytes_of(const at::Tensor& t);

}  // namespace fluxcpp::backend
