// make_context: every group's context through the library's store entry, under keys of the
// group's creation.
#include "bootstrap.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../engine/capi_call.hpp"

namespace fluxcpp::backend {
namespace {

// fluxcpp_store_t over a c10d store, under a prefix of the creation's own.
struct StoreUser {
  c10d::Store* store;
  std::string prefix;
};

int store_set(void* user, const char* key, const void* value, size_t bytes) {
  auto* u = static_cast<StoreUser*>(user);
  try {
    const auto* p = static_cast<const uint8_t*>(value);
    u->store->set(u->prefix + key, std::vector<uint8_t>(p, p + bytes));
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int store_wait(void* user, const char* key, double timeout_s) {
  auto* u = static_cast<StoreUser*>(user);
  try {
    const auto ms = std::chrono::milliseconds(
        static_cast<int64_t>(std::min(timeout_s, 1e9) * 1000.0) + 1);
    u->store->wait({u->prefix + key}, ms);
    return 0;
  } catch (const std::exception& e) {
    // c10d says "Timeout" (or "timed out") when the time ran out; anything else: a lost store.
    const std::string what = e.what();
    return what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos
               ? 1
               : -1;
  }
}

int store_get(void* user, const char* key, void* value, size_t capacity, size_t* bytes) {
  auto* u = static_cast<StoreUser*>(user);
  try {
    const std::vector<uint8_t> v = u->store->get(u->prefix + key);
    *bytes = v.size();
    if (v.size() <= capacity && !v.empty()) std::memcpy(value, v.data(), v.size());
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

// FLUXCPP_BACKEND_RANKS_PER_NODE=n (tests): the group's ranks in consecutive groups of n act as
// hosts of one machine (the config's ranks_per_host); 0 or unset: hosts are machines.
int simulated_ranks_per_host() {
  const char* rpn = std::getenv("FLUXCPP_BACKEND_RANKS_PER_NODE");
  const int n = rpn == nullptr ? 0 : std::atoi(rpn);
  return n > 0 ? n : 0;
}

}  // namespace

fluxcpp_context_t make_context(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                               std::chrono::milliseconds timeout) {
  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  cfg.timeout_s = static_cast<double>(timeout.count()) / 1000.0;
  cfg.ranks_per_host = simulated_ranks_per_host();
  // The keys follow docs/design.md "Store keys": the job is "c10d" (the store is the group's
  // own PrefixStore), the generation the creation's number. Creations under one store are
  // numbered by arrival: the n-th creation's ranks arrive as n*size + 1 .. (n+1)*size, so a
  // group made again on the same store gets keys of its own.
  const int64_t arrival = store->add("fluxcpp/c10d/generation", 1);
  const std::string root = "fluxcpp/c10d/" + std::to_string((arrival - 1) / size);
  // The library makes the context from the store whatever launched the job (torchrun,
  // multiprocessing, mpirun): the ranks of a host meet in shared memory, hosts over its TCP
  // channel (its network choice, docs/design.md "The network channels").
  fluxcpp_context_t ctx = nullptr;
  StoreUser user{store.get(), root + "/ctx/0/"};  // one attempt per generation
  fluxcpp_store_t cs{&user, store_set, store_wait, store_get};
  check(fluxcpp_context_create_from_store(&cs, size, rank, &cfg, &ctx), "context create");
  return ctx;
}

}  // namespace fluxcpp::backend
