// In-place dtype conversion of one buffer: f32 -> bf16 and f64 -> f32 (narrowing), bf16 -> f32 and
// f32 -> f64 (widening). Memory only; ops/inplace_cast runs the steps below on threads.
//
// Layout: element i of the input sits at data + i*sizeof(from), element i of the output at
// data + i*sizeof(to). Narrowing: output i is at or before input i, so a forward walk never
// overwrites input it has not read yet. Widening: output i covers inputs 2i and 2i+1, which are
// at or after i, so the walk goes backward.
//
// Values: narrowing rounds to nearest even (overflow gives +-Inf, denormal inputs and outputs are
// exact); every NaN comes out as a quiet NaN with its sign (a signalling NaN gets its quiet bit,
// as IEEE convertFormat does); +-Inf and +-0 stay; widening is otherwise exact. Results do not
// depend on the caller's rounding mode or FTZ/DAZ setting.
#pragma once

#include <cstdint>
#include <vector>

#include "fluxcpp/types.hpp"

namespace fluxcpp::kernels {

// f32 -> bf16, f64 -> f32, bf16 -> f32, f32 -> f64.
bool inplace_cast_supported(DType from, DType to);

// The instruction sets a range can run on. kAuto picks the widest available; the others exist so
// that tests can check every path on one machine.
enum class CastIsa { kAuto, kScalar, kSse2, kAvx2 };
bool cast_isa_available(CastIsa isa);

// Converts elements [begin, end) in place, walking forward when narrowing and backward when
// widening; each vector of inputs is loaded before any output of it is stored. Correct when every
// input byte the range's outputs overwrite belongs to an element of this range or to one already
// converted. Supported pairs only (unchecked); data must not be null when begin < end.
void inplace_cast_range(void* data, int64_t begin, int64_t end, DType from, DType to,
                        CastIsa isa = CastIsa::kAuto);

// One step of a whole-buffer cast. Steps run in order, each after the previous has finished. A
// step with split == false must run as one inplace_cast_range call (its outputs overwrite its own
// inputs, which the walk direction makes safe). A step with split == true may be cut into pieces
// run concurrently in any order: its outputs overwrite only inputs of steps already finished.
struct CastStep {
  int64_t begin = 0, end = 0;
  bool split = false;
};

// The steps of a cast of `count` elements: one unsplit step of min(count, serial) elements (first
// when narrowing, last when widening) and splittable steps that grow (narrowing) or shrink
// (widening) geometrically by the size ratio, about log2(count / serial) of them. The argument
// for their safety is at the definition. Supported pairs only; serial >= 1.
std::vector<CastStep> inplace_cast_steps(int64_t count, DType from, DType to, int64_t serial);

}  // namespace fluxcpp::kernels
