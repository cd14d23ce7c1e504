// A rank's own words for why its arguments of the next call were refused before they reached the
// op (fluxcpp_refuse_next_call): set per thread by the C ABI, read by the call handshake, which
// then publishes it as this rank's argument error instead of the op's own message about the
// placeholder arguments the caller passed; cleared by the C ABI at the end of every call.
#pragma once

#include <string>

namespace fluxcpp::ops {

// This thread's pending refusal ("" if none).
std::string& call_refusal();

}  // namespace fluxcpp::ops
