// make_context: the store carries the unique id (or the MPI ranks) of each group's creation.
#include "bootstrap.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../engine/capi_call.hpp"

namespace fluxcpp::backend {
namespace {

// Open MPI's mpirun started this process: its contexts are built over MPI. (Not PMI_SIZE: srun
// sets it for processes that torchrun then starts several of, each not an MPI rank.)
bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

bool g_initialized_mpi = false;

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void ensure_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw Failure(FLUXCPP_ERROR_MPI, "fluxcpp backend: MPI_Init_thread failed");
  if (!g_initialized_mpi) std::atexit(finalize_mpi);
  g_initialized_mpi = true;
}

std::vector<uint8_t> fetch(c10d::Store& store, const std::string& key,
                           std::chrono::milliseconds timeout, int rank) {
  try {
    store.wait({key}, timeout);
    return store.get(key);
  } catch (const std::exception& e) {
    throw Failure(FLUXCPP_ERROR_TIMEOUT, "fluxcpp backend: rank " + std::to_string(rank) +
                                             " waited for '" + key + "' in the store: " + e.what());
  }
}

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

}  // namespace

fluxcpp_context_t make_context(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                               std::chrono::milliseconds timeout) {
  fluxcpp_context_config_t cfg = FLUXCPP_CONTEXT_CONFIG_INIT;
  cfg.timeout_s = static_cast<double>(timeout.count()) / 1000.0;
  // Creations under one store are numbered by arrival: the n-th creation's ranks arrive as
  // n*size + 1 .. (n+1)*size, so a group made again on the same store gets keys of its own.
  const int64_t arrival = store->add("fluxcpp/arrivals", 1);
  const std::string gen = std::to_string((arrival - 1) / size);
  fluxcpp_context_t ctx = nullptr;
  if (under_mpirun()) {
    ensure_mpi();
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    const std::string me = std::to_string(world_rank);
    store->set("fluxcpp/" + gen + "/mpi/" + std::to_string(rank),
               std::vector<uint8_t>(me.begin(), me.end()));
    std::vector<int> members(size);
    for (int r = 0; r < size; ++r) {
      auto v = fetch(*store, "fluxcpp/" + gen + "/mpi/" + std::to_string(r), timeout, rank);
      members[r] = std::stoi(std::string(v.begin(), v.end()));
    }
    MPI_Group world, group;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, size, members.data(), &group);
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL)
      throw Failure(FLUXCPP_ERROR_MPI, "fluxcpp backend: MPI_Comm_create_group failed (rank " +
                                           std::to_string(rank) + ")");
    // Tests simulate hosts as the library's do: groups of this many consecutive ranks.
    if (const char* rpn = std::getenv("FLUXCPP_BACKEND_RANKS_PER_NODE"))
      cfg.ranks_per_node = std::atoi(rpn);
    const fluxcpp_status_t s = fluxcpp_context_create(comm, &cfg, &ctx);
    MPI_Comm_free(&comm);
    check(s, "context create (MPI)");
    return ctx;
  }
  // Without MPI the library meets the ranks through the store itself: one host in shared
  // memory, several over its TCP channel.
  StoreUser user{store.get(), "fluxcpp/" + gen + "/ctx/"};
  fluxcpp_store_t cs{&user, store_set, store_wait, store_get};
  check(fluxcpp_context_create_from_store(&cs, size, rank, &cfg, &ctx), "context create");
  return ctx;
}

}  // namespace fluxcpp::backend
