// Tensor checks and the mapping of torch's dtypes and ReduceOps onto the engine's.
#include "tensor_args.hpp"

#include <c10/util/Exception.h>

namespace fluxcpp::backend {
namespace {

bool scalar_of(at::ScalarType t, Scalar* s) {
  switch (t) {
    case at::kFloat: *s = Scalar::kF32; return true;
    case at::kDouble: *s = Scalar::kF64; return true;
    case at::kBFloat16: *s = Scalar::kBF16; return true;
    case at::kHalf: *s = Scalar::kF16; return true;
    case at::kChar: *s = Scalar::kI8; return true;
    case at::kByte: *s = Scalar::kU8; return true;
    case at::kShort: *s = Scalar::kI16; return true;
    case at::kInt: *s = Scalar::kI32; return true;
    case at::kLong: *s = Scalar::kI64; return true;
    case at::kBool: *s = Scalar::kBool; return true;
    case at::kComplexFloat: *s = Scalar::kF32; return true;
    case at::kComplexDouble: *s = Scalar::kF64; return true;
    default: return false;
  }
}

Reduce reduce_of(const c10d::ReduceOp& op, const char* call) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return Reduce::kSum;
    case c10d::ReduceOp::AVG: return Reduce::kAvg;
    case c10d::ReduceOp::PRODUCT: return Reduce::kProduct;
    case c10d::ReduceOp::MIN: return Reduce::kMin;
    case c10d::ReduceOp::MAX: return Reduce::kMax;
    case c10d::ReduceOp::BAND: return Reduce::kBand;
    case c10d::ReduceOp::BOR: return Reduce::kBor;
    case c10d::ReduceOp::BXOR: return Reduce::kBxor;
    default: break;
  }
  TORCH_CHECK(false, "ProcessGroupFluxcpp::", call, ": ReduceOp ", static_cast<int>(op.op_),
              " (PREMUL_SUM) is not supported by the fluxcpp backend");
}

}  // namespace

void check_tensor(const at::Tensor& t, const char* call, const char* what) {
  TORCH_CHECK(t.layout() == at::kStrided, "ProcessGroupFluxcpp::", call, ": ", what, " is ",
              t.layout(), "; the fluxcpp backend supports dense tensors only (sparse: use gloo)");
  TORCH_CHECK(t.device().is_cpu(), "ProcessGroupFluxcpp::", call, ": ", what, " is on ",
              t.device(), "; the fluxcpp backend supports CPU tensors only");
  TORCH_CHECK(t.is_contiguous(), "ProcessGroupFluxcpp::", call, ": ", what,
              " must be contiguous (call .contiguous() first)");
}

const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* call) {
  TORCH_CHECK(ts.size() == 1, "ProcessGroupFluxcpp::", call, ": expects one tensor, got ",
              ts.size());
  check_tensor(ts[0], call, "tensor");
  return ts[0];
}

void check_list(const std::vector<at::Tensor>& ts, const at::Tensor& like, int size,
                const char* call, const char* what) {
  TORCH_CHECK(static_cast<int>(ts.size()) == size, "ProcessGroupFluxcpp::", call, ": ", what,
              " has ", ts.size(), " tensors; the group has ", size, " ranks");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    check_tensor(ts[i], call, what);
    TORCH_CHECK(ts[i].scalar_type() == like.scalar_type(), "ProcessGroupFluxcpp::", call, ": ",
                what, "[", i, "] is ", ts[i].scalar_type(), ", the input ", like.scalar_type());
    TORCH_CHECK(ts[i].numel() == like.numel(), "ProcessGroupFluxcpp::", call, ": ", what, "[", i,
                "] has ", ts[i].numel(), " elements, the input ", like.numel());
  }
}

void check_rank(int64_t r, int size, const char* call, const char* what) {
  TORCH_CHECK(r >= 0 && r < size, "ProcessGroupFluxcpp::", call, ": ", what, " ", r,
              " is not a rank of the group (size ", size, ")");
}

Reduction reduction_of(const at::Tensor& t, const c10d::ReduceOp& op, const char* call) {
  Reduction red{};
  TORCH_CHECK(scalar_of(t.scalar_type(), &red.scalar), "ProcessGroupFluxcpp::", call,
              ": dtype ", t.scalar_type(), " is not supported by the fluxcpp backend");
  red.reduce = reduce_of(op, call);
  red.count = t.numel();
  if (t.is_complex()) {
    TORCH_CHECK(red.reduce == Reduce::kSum || red.reduce == Reduce::kAvg,
                "ProcessGroupFluxcpp::", call, ": ReduceOp ", reduce_name(red.reduce),
                " is not defined on complex tensors");
    red.count *= 2;
  }
  TORCH_CHECK(reduce_supported(red.scalar, red.reduce), "ProcessGroupFluxcpp::", call,
              ": ReduceOp ", reduce_name(red.reduce), " is not defined on ", t.scalar_type());
  return red;
}

std::string dtype_name(const at::Tensor& t) {
  if (t.scalar_type() == at::kComplexFloat) return "complex64";
  if (t.scalar_type() == at::kComplexDouble) return "complex128";
  Scalar s{};
  return scalar_of(t.scalar_type(), &s) ? scalar_name(s) : c10::toString(t.scalar_type());
}

int64_t nbytes(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

CallSpec spec_of(const at::Tensor& t, const char* reduce, int root) {
  CallSpec s;
  s.reduce = reduce;
  s.root = root;
  s.dtype = dtype_name(t);
  s.count = t.numel();
  return s;
}
CallSpec spec_of(const std::vector<at::Tensor>& ts, const char* reduce) {
  CallSpec s;
  s.reduce = reduce;
  s.parts = static_cast<int64_t>(ts.size());
  s.count = 0;
  for (const at::Tensor& t : ts) {
    const std::string d = dtype_name(t);
    if (s.dtype.empty())
      s.dtype = d;
    else if (s.dtype != d && s.dtype.find("/" + d) == std::string::npos)
      s.dtype += "/" + d;
    s.count += t.numel();
  }
  return s;
}


}  // namespace fluxcpp::backend
