// In-place dtype conversion of one buffer: f32 -> bf16 and f64 -> f32 (narrowing), bf16 -> f32 and
// f32 -> f64 (widening). Memory only; ops/inplace_cast runs the plan below on threads.
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

struct CastRange {
  int64_t begin = 0, end = 0;
};

// How several threads share a whole-buffer cast. `serial` runs alone, as one inplace_cast_range
// call: before the chains when narrowing (serial_first), after all of them when widening. Each
// chain is run by one thread, its ranges one after another in order; the chains run concurrently
// with no synchronisation between them. Every element is in exactly one range.
struct CastPlan {
  CastRange serial;
  bool serial_first = true;
  std::vector<std::vector<CastRange>> chains;
};

// The plan for `count` elements on `threads` chains: serial = [0, A) with A = ceil(count /
// 2^doublings); then `doublings` geometric steps [A*2^j, A*2^(j+1)) (clipped to count), each cut
// into `threads` pieces at the same proportions, and chain t holds piece t of every step (in
// increasing j when narrowing, decreasing when widening). Why no chain ever overwrites input
// another thread has yet to read is argued at the definition. Supported pairs only;
// threads >= 1, 0 <= doublings <= 30.
CastPlan inplace_cast_plan(int64_t count, DType from, DType to, int threads, int doublings);

}  // namespace fluxcpp::kernels
