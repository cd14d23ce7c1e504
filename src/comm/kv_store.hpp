// KvStore: the caller's key-value store a context is bootstrapped from without MPI (the UCC
// convention: the caller hands over its out-of-band exchange; torch's c10d store, a serving
// stack's etcd, a file). Three operations, each may throw fluxcpp::Error:
//   set(key, value)          stores value under key (overwrites);
//   wait(key, timeout_s)     true once key exists, false when timeout_s passed first;
//   get(key)                 the value of a key that exists.
// Keys are the caller's namespace: one context per prefix (the caller's store prefixes them).
#pragma once

#include "fluxcpp/context.hpp"

namespace fluxcpp::comm {

using KvStore = KeyValueStore;

}  // namespace fluxcpp::comm
