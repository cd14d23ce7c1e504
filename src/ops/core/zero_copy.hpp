// Zero-copy input (docs/api.md): an op hands out this rank's slot of its symmetric segment, the
// caller writes its input there (e.g. the previous layer writes its output straight into it)
// and passes the slot as `input`; the op then skips copying it in. Misuse is an error, never
// corrupt data: a forward from the slot without input_buffer() since this rank's previous
// forward is kInvalidUsage on every rank (through the handshake); an input that overlaps the
// slot without starting at it, or an output that overlaps any of the op's memory, is
// kInvalidArgument. Neither breaks the op.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

#include "ops/core/handshake.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::ops {

class ZeroCopyInput {
 public:
  // input_buffer(): not collective. Waits until every host peer has finished reading the slot
  // for the previous forward (kTimeout naming the peer otherwise), then returns it. The core's
  // Spec must have `releases` set.
  void* acquire(OpCore& core, char* slot);

  // At the start of a forward: whether `input` is the slot, and (into d, unless d already
  // carries an error) the misuse checks. `outputs`: (pointer, bytes) of every output.
  bool check(const OpCore& core, const char* slot, const void* input, std::size_t input_bytes,
             std::initializer_list<std::pair<const void*, std::size_t>> outputs, CallDescriptor& d);

 private:
  bool armed_ = false;
};

}  // namespace fluxcpp::ops
