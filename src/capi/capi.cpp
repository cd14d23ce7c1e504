// The C ABI: status strings, version and the context. The ops' entry points are in the other
// src/capi files; shared helpers in capi_common.hpp.
#include "capi/capi_common.hpp"

namespace fluxcpp::capi {
std::string& last_error() {
  thread_local std::string message;
  return message;
}
}  // namespace fluxcpp::capi

using namespace fluxcpp::capi;

extern "C" {

const char* fluxcpp_status_string(fluxcpp_status_t status) {
  switch (status) {
    case FLUXCPP_SUCCESS: return "success";
    case FLUXCPP_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case FLUXCPP_ERROR_INVALID_USAGE: return "invalid usage";
    case FLUXCPP_ERROR_SYSTEM: return "system error";
    case FLUXCPP_ERROR_MPI: return "MPI error";
    case FLUXCPP_ERROR_TIMEOUT: return "timeout";
    case FLUXCPP_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* fluxcpp_last_error(void) {
  return last_error().c_str();
}

int fluxcpp_version(void) {
  return fluxcpp::version();
}

fluxcpp_status_t fluxcpp_refuse_next_call(const char* reason) {
  try {
    fluxcpp::ops::call_refusal() = reason != nullptr ? reason : "";
    return FLUXCPP_SUCCESS;
  } catch (const std::bad_alloc&) {
    return fail(FLUXCPP_ERROR_SYSTEM, "fluxcpp_refuse_next_call: out of memory");
  }
}

}  // extern "C"

namespace {

// The options a config carries, and what is wrong with it on this rank ("" if nothing).
std::string read_config(const fluxcpp_context_config_t* config, fluxcpp::ContextOptions* o) {
  if (config == nullptr) return "";
  // A caller built against an older, shorter struct passes a smaller size: read only what it has.
  const size_t n = config->struct_size;
  if (n < offsetof(fluxcpp_context_config_t, ranks_per_node) + sizeof(int))
    return "context: config->struct_size=" + std::to_string(n) +
           " is too small (initialise it with FLUXCPP_CONTEXT_CONFIG_INIT)";
  o->ranks_per_host = config->ranks_per_node;  // its former name, resolved below
  if (n >= offsetof(fluxcpp_context_config_t, timeout_s) + sizeof(double))
    o->timeout_s = config->timeout_s;
  if (n >= offsetof(fluxcpp_context_config_t, compute_threads) + sizeof(int))
    o->compute_threads = config->compute_threads;
  if (n >= offsetof(fluxcpp_context_config_t, comm_threads) + sizeof(int))
    o->comm_threads = config->comm_threads;
  if (n >= offsetof(fluxcpp_context_config_t, ranks_per_host) + sizeof(int) &&
      config->ranks_per_host != 0) {
    if (o->ranks_per_host != 0 && o->ranks_per_host != config->ranks_per_host)
      return "context: config->ranks_per_host=" + std::to_string(config->ranks_per_host) +
             " and config->ranks_per_node=" + std::to_string(o->ranks_per_host) +
             " (its former name) differ; set one";
    o->ranks_per_host = config->ranks_per_host;
  }
  return "";
}

}  // namespace

extern "C" {

fluxcpp_status_t fluxcpp_context_create(MPI_Comm comm, const fluxcpp_context_config_t* config,
                                        fluxcpp_context_t* ctx) {
  if (ctx != nullptr) *ctx = nullptr;
  return guarded([&] {
    fluxcpp::ContextOptions o;
    // Rank-local problems still go through the collective constructor, which then fails on
    // every rank with this message instead of leaving the other ranks waiting.
    std::string local_error = read_config(config, &o);
    if (ctx == nullptr) local_error = "context: the ctx out-pointer is NULL";
    auto impl = std::make_shared<fluxcpp::detail::ContextImpl>(comm, o, local_error);
    *ctx = new fluxcpp_context_s{std::move(impl)};
  });
}

fluxcpp_status_t fluxcpp_get_unique_id(fluxcpp_unique_id_t* id) {
  if (id == nullptr) return null_arg("fluxcpp_get_unique_id", "id");
  return guarded([&] {
    const fluxcpp::UniqueId made = fluxcpp::get_unique_id();
    static_assert(sizeof made.internal == sizeof id->internal);
    std::memcpy(id->internal, made.internal, sizeof id->internal);
  });
}

fluxcpp_status_t fluxcpp_context_create_from_id(const fluxcpp_unique_id_t* id, int world_size,
                                                int rank, const fluxcpp_context_config_t* config,
                                                fluxcpp_context_t* ctx) {
  if (ctx != nullptr) *ctx = nullptr;
  // Without the id there is no rendezvous to fail at: this rank fails alone, its peers time out.
  if (id == nullptr) return null_arg("fluxcpp_context_create_from_id", "id");
  return guarded([&] {
    fluxcpp::ContextOptions o;
    std::string local_error = read_config(config, &o);
    if (ctx == nullptr) local_error = "context: the ctx out-pointer is NULL";
    auto impl = std::make_shared<fluxcpp::detail::ContextImpl>(id->internal, world_size, rank, o,
                                                               local_error);
    *ctx = new fluxcpp_context_s{std::move(impl)};
  });
}

namespace {

fluxcpp::comm::KvStore store_of(const fluxcpp_store_t& s) {
  using fluxcpp::Errc;
  fluxcpp::comm::KvStore k;
  k.set = [s](const std::string& key, const std::string& value) {
    if (s.set(s.user, key.c_str(), value.data(), value.size()) != 0)
      fluxcpp::raise(Errc::kSystem, "context create: the store's set failed for key '{}'", key);
  };
  k.wait = [s](const std::string& key, double timeout_s) {
    const int rc = s.wait(s.user, key.c_str(), timeout_s);
    if (rc == 0 || rc == 1) return rc == 0;
    fluxcpp::raise(Errc::kSystem, "context create: the store's wait failed for key '{}' ({})",
                   key, rc);
  };
  k.get = [s](const std::string& key) {
    std::string v(256, '\0');
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::size_t bytes = 0;
      if (s.get(s.user, key.c_str(), v.data(), v.size(), &bytes) != 0)
        fluxcpp::raise(Errc::kSystem, "context create: the store's get failed for key '{}'", key);
      if (bytes <= v.size()) {
        v.resize(bytes);
        return v;
      }
      v.assign(bytes, '\0');
    }
    fluxcpp::raise(Errc::kSystem, "context create: the store's value for key '{}' keeps growing",
                   key);
  };
  return k;
}

}  // namespace

fluxcpp_status_t fluxcpp_context_create_from_store(const fluxcpp_store_t* store, int world_size,
                                                   int rank,
                                                   const fluxcpp_context_config_t* config,
                                                   fluxcpp_context_t* ctx) {
  if (ctx != nullptr) *ctx = nullptr;
  if (store == nullptr) return null_arg("fluxcpp_context_create_from_store", "store");
  if (store->set == nullptr || store->get == nullptr || store->wait == nullptr)
    return null_arg("fluxcpp_context_create_from_store", "store->set, get or wait");
  return guarded([&] {
    fluxcpp::ContextOptions o;
    std::string local_error = read_config(config, &o);
    if (ctx == nullptr) local_error = "context: the ctx out-pointer is NULL";
    const fluxcpp::comm::KvStore kv = store_of(*store);
    auto impl =
        std::make_shared<fluxcpp::detail::ContextImpl>(kv, world_size, rank, o, local_error);
    *ctx = new fluxcpp_context_s{std::move(impl)};
  });
}

fluxcpp_status_t fluxcpp_context_share(fluxcpp_context_t ctx, fluxcpp_context_t* shared) {
  if (shared != nullptr) *shared = nullptr;
  if (ctx == nullptr) return null_arg("fluxcpp_context_share", "ctx");
  if (shared == nullptr) return null_arg("fluxcpp_context_share", "shared");
  return guarded([&] { *shared = new fluxcpp_context_s{ctx->impl, true}; });
}

fluxcpp_status_t fluxcpp_context_destroy(fluxcpp_context_t ctx) {
  if (ctx == nullptr) return FLUXCPP_SUCCESS;
  if (ctx->shared) {  // another handle owns the runtime
    delete ctx;
    return FLUXCPP_SUCCESS;
  }
  fluxcpp_status_t s = guarded([&] { ctx->impl->close(); });
  delete ctx;
  return s;
}

fluxcpp_status_t fluxcpp_context_info(fluxcpp_context_t ctx, int* rank, int* world_size,
                                      int* host_rank, int* host_size) {
  if (ctx == nullptr) return null_arg("fluxcpp_context_info", "ctx");
  const auto& c = *ctx->impl;
  if (rank != nullptr) *rank = c.topo().world_rank();
  if (world_size != nullptr) *world_size = c.topo().world_size();
  if (host_rank != nullptr) *host_rank = c.topo().host_rank();
  if (host_size != nullptr) *host_size = c.topo().host_size();
  return FLUXCPP_SUCCESS;
}

}  // extern "C"
