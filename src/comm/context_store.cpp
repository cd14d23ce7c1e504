// ContextImpl from the caller's key-value store: every rank publishes who it is and where it
// runs; the ranks of each host meet in shared memory through an id their first rank sets; hosts
// meet over the gloo channel.
#include <unistd.h>

#include <algorithm>
#include <random>

#include "comm/context_impl.hpp"
#include "comm/deadline_scope.hpp"
#include "comm/gloo_group.hpp"
#include "comm/gloo_network.hpp"
#include "comm/shm_group.hpp"
#include "deadline.hpp"
#include "error_util.hpp"
#include "log.hpp"

namespace fluxcpp::detail {

namespace {

constexpr char kMagic[] = "fluxcpp-store-2";
constexpr char kSep = '\x1e';

double left_s(SteadyTime deadline) {
  if (deadline == SteadyTime::max()) return 1e9;
  return std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now())
                           .count());
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out(1);
  for (char ch : s) {
    if (ch == kSep)
      out.emplace_back();
    else
      out.back() += ch;
  }
  return out;
}

// What a rank publishes: the fields below, in this order.
struct Arrival {
  long long world_size = 0, rank = -1, pid = 0, per_host = 0;
  std::string host, boot, name, nonce, error;
};

std::string encode(const Arrival& a) {
  return fmt::format("{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}{}", kMagic, kSep, a.world_size, kSep,
                     a.rank, kSep, a.pid, kSep, a.per_host, kSep, a.host, kSep, a.boot, kSep,
                     a.name, kSep, a.nonce, kSep, a.error);
}

Arrival decode(const std::string& text, int key_rank) {
  const std::vector<std::string> f = split(text);
  if (f.size() != 10 || f[0] != kMagic)
    raise(Errc::kInvalidUsage,
          "context create: the store's key for rank {} does not hold a fluxcpp arrival (another "
          "program or library version wrote it: give each context a store prefix of its own)",
          key_rank);
  Arrival a;
  try {
    a.world_size = std::stoll(f[1]);
    a.rank = std::stoll(f[2]);
    a.pid = std::stoll(f[3]);
    a.per_host = std::stoll(f[4]);
  } catch (const std::exception&) {
    raise(Errc::kInvalidUsage, "context create: the store's key for rank {} is corrupted",
          key_rank);
  }
  a.host = f[5];
  a.boot = f[6];
  a.name = f[7];
  a.nonce = f[8];
  a.error = f[9];
  return a;
}

// The keys of one create, under the caller's prefix (docs/design.md "Store keys"): the arrivals
// first, then everything else under the job (rank 0's nonce, fresh per create) by purpose.
std::string rank_key(int r) {
  return fmt::format("fluxcpp/rank/{}", r);
}
std::string job_key(const std::string& job, const std::string& purpose) {
  return fmt::format("fluxcpp/{}/{}", job, purpose);
}

}  // namespace

namespace {

std::string host_identity() {
  if (const char* h = std::getenv("FLUXCPP_HOST_ID"); h != nullptr && *h != '\0')
    return fmt::format("{}/{}", comm::this_boot_id(), h);
  return fmt::format("{}/{}", comm::this_boot_id(), comm::this_host_name());
}

// ranks_per_host = n > 0: ranks 0..n-1, n..2n-1, ... act as hosts of their own (tests and
// benchmarks of the multi-host paths on one machine, as the MPI context's grouping). Every rank
// reads the same arrivals: the same verdict on every rank.
void group_simulated_hosts(std::vector<Arrival>& all) {
  const long long n = all[0].per_host;
  for (const Arrival& a : all)
    if (a.per_host != n)
      throw AgreedError(Errc::kInvalidArgument,
                        fmt::format("context create: ranks_per_host={} on rank 0 but {} on rank "
                                    "{}: pass the same on every rank",
                                    n, a.per_host, a.rank));
  if (n <= 0) return;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::size_t first = r / static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    if (all[r].host != all[first].host)
      throw AgreedError(Errc::kInvalidArgument,
                        fmt::format("context create: ranks_per_host={} groups ranks of different "
                                    "hosts (rank {} and rank {}): a group must share a machine",
                                    n, first, r));
  }
  for (std::size_t r = 0; r < all.size(); ++r)
    all[r].host += fmt::format("/group{}", r / static_cast<std::size_t>(n));
}

}  // namespace

ContextImpl::ContextImpl(const comm::KvStore& store, int world_size, int rank,
                         const ContextOptions& options, const std::string& local_error) {
  const SteadyTime deadline = deadline_after(create_timeout_s(options));
  comm::DeadlineScope scope(deadline, "context create");
  FLUXCPP_CHECK_ARG(world_size >= 1, "context: world_size={} must be >= 1", world_size);
  FLUXCPP_CHECK_ARG(rank >= 0 && rank < world_size,
                    "context: rank={} must be in [0, world_size={})", rank, world_size);
  // 1. Arrivals: every rank's identity, in the store. Errors found here travel in the record, so
  //    that every rank raises the same one.
  Arrival mine;
  mine.world_size = world_size;
  mine.rank = rank;
  mine.pid = static_cast<long long>(getpid());
  mine.host = host_identity();
  mine.boot = comm::this_boot_id();
  mine.name = comm::this_host_name();
  mine.nonce = fmt::format("{:016x}", std::random_device{}() * 0x100000001ull ^
                                          static_cast<unsigned long long>(mine.pid));
  mine.per_host = options.ranks_per_host;
  mine.error = local_error;
  if (mine.error.empty() && options.ranks_per_host < 0)
    mine.error = fmt::format("context: ranks_per_host={} must be >= 0", options.ranks_per_host);
  for (char& ch : mine.error)
    if (ch == kSep) ch = ' ';
  store.set(rank_key(rank), encode(mine));
  // Read in rank order as they arrive: a rank of another world size is told at once (it may
  // wait for a rank that does not exist).
  std::vector<Arrival> all(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    if (!store.wait(rank_key(r), left_s(deadline))) {
      std::string missing = std::to_string(r);
      for (int q = r + 1; q < world_size; ++q)
        if (!store.wait(rank_key(q), 0.0)) missing += fmt::format(", {}", q);
      raise(Errc::kTimeout,
            "context create: timed out after {} s in the store rendezvous: rank(s) {} did not "
            "take part (this is rank {})",
            create_timeout_s(options), missing, rank);
    }
    all[r] = decode(store.get(rank_key(r)), r);
    if (all[r].world_size != world_size)
      raise(Errc::kInvalidArgument,
            "context create: world_size={} on rank {}, but rank {} passed {}", world_size, rank,
            r, all[r].world_size);
    if (all[r].rank != r)
      raise(Errc::kInvalidUsage,
            "context create: the store's key for rank {} holds rank {}'s arrival", r,
            all[r].rank);
  }
  for (int r = 0; r < world_size; ++r)
    if (!all[r].error.empty())
      throw AgreedError(Errc::kInvalidArgument,
                        r == rank ? all[r].error
                                  : fmt::format("{} (reported by rank {})", all[r].error, r));
  group_simulated_hosts(all);
  if (all[rank].nonce != mine.nonce)
    raise(Errc::kInvalidUsage,
          "context create: another process (pid {} on host '{}') also claims rank {} under this "
          "store prefix: two jobs or two calls share the prefix (give each context its own)",
          all[rank].pid, all[rank].name, rank);
  // 2. Hosts, numbered in the order of their lowest rank; ranks on a host by world rank. The ops
  //    across hosts need as many ranks on every host: ranks spread unevenly (3 ranks on 2 hosts,
  //    a framework's subgroup) are each a host of their own, all of their traffic over TCP.
  std::vector<int> per_host;
  {
    std::vector<std::string> seen;
    for (const Arrival& a : all) {
      auto it = std::find(seen.begin(), seen.end(), a.host);
      if (it == seen.end()) {
        seen.push_back(a.host);
        per_host.push_back(1);
      } else {
        ++per_host[it - seen.begin()];
      }
    }
  }
  const bool uneven =
      per_host.size() > 1 && std::count(per_host.begin(), per_host.end(), per_host[0]) !=
                                 static_cast<std::ptrdiff_t>(per_host.size());
  if (uneven)
    for (int r = 0; r < world_size; ++r) all[r].host += fmt::format("/rank{}", r);
  std::vector<std::string> hosts;
  std::vector<int> host_of(world_size, 0), local_of(world_size, 0), on_host;
  for (int r = 0; r < world_size; ++r) {
    auto it = std::find(hosts.begin(), hosts.end(), all[r].host);
    const int n = static_cast<int>(it - hosts.begin());
    if (it == hosts.end()) {
      hosts.push_back(all[r].host);
      on_host.push_back(0);
    }
    host_of[r] = n;
    local_of[r] = on_host[n]++;
  }
  topo_ = comm::Topology(rank, std::move(host_of), std::move(local_of));
  shared_size_ = 0;
  for (const Arrival& a : all) shared_size_ += a.boot == mine.boot ? 1 : 0;
  if (uneven && rank == 0)
    FLUXCPP_LOG_INFO("context: {} ranks on {} hosts, not as many on each: every rank is a host of "
                     "its own (all traffic over TCP)", world_size, per_host.size());
  try {
    // 3. The host's ranks meet in shared memory, through an id the host's first rank sets.
    // Keys of this meeting only: rank 0's nonce names them, so ranks that read another call's
    // arrival of rank 0 never meet this one's hosts or addresses.
    const std::string job = all[0].nonce;
    const std::string id_key = job_key(job, fmt::format("host/{}", topo_.host_id()));
    char id[comm::kUniqueIdBytes] = {};
    if (topo_.host_rank() == 0) {
      comm::make_unique_id(id);
      store.set(id_key, std::string(id, sizeof id));
    } else {
      if (!store.wait(id_key, left_s(deadline)))
        raise(Errc::kTimeout,
              "context create: timed out after {} s waiting for rank {} (the first rank of this "
              "host) to set the host's id in the store (this is rank {})",
              create_timeout_s(options), topo_.world_rank_of(topo_.host_id(), 0), rank);
      const std::string v = store.get(id_key);
      if (v.size() != sizeof id)
        raise(Errc::kInvalidUsage, "context create: the store's host id is corrupted");
      std::copy(v.begin(), v.end(), id);
    }
    const comm::ParsedId parsed = comm::parse_unique_id(id);
    if (parsed.boot_id != comm::this_boot_id())
      raise(Errc::kInvalidUsage,
            "context create: rank {} and rank {} claim the same host ('{}'), but run on "
            "different machines ('{}' and '{}'): FLUXCPP_HOST_ID must name ranks of one machine",
            rank, topo_.world_rank_of(topo_.host_id(), 0), all[rank].host, comm::this_host_name(),
            parsed.host);
    auto host_group = std::make_unique<comm::ShmGroup>(parsed.segment, topo_.host_rank(),
                                                       topo_.host_size(), parsed.secret);
    life_.set_host_pids(host_group->pids());
    // 4. Hosts meet over the network: the gloo channel, the context's network (one host has
    //    none: comm::no_network()) and its control plane.
    if (topo_.num_hosts() > 1) {
      const bool several_machines = shared_size_ < world_size;
      auto net = std::make_shared<comm::GlooNet>(store, job_key(job, "net/"), rank,
                                                 world_size, deadline, several_machines);
      group_ = std::make_unique<comm::GlooGroup>(net);
      net_ = std::make_unique<comm::GlooNetwork>(std::move(net));
      own_host_group_ = std::move(host_group);
      host_group_ = own_host_group_.get();
    } else {
      group_ = std::move(host_group);
      host_group_ = group_.get();
    }
    // Every rank read the same arrivals (two calls under one prefix would not).
    uint64_t seen = 1469598103934665603ull;  // FNV-1a over the nonces in rank order
    for (const Arrival& a : all)
      for (char ch : a.nonce) seen = (seen ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    comm::agree_value(*group_, "context create",
                      "the arrivals read from the store (a hash of every rank's nonce: two "
                      "calls or jobs share the store prefix)",
                      static_cast<long long>(seen >> 1));
    start(options);
  } catch (const Error& e) {
    const std::string gone = gone_after(e);
    release();
    if (gone.empty()) throw;
    throw Error(e.code(), fmt::format("{} ({})", e.what(), gone));
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace fluxcpp::detail

namespace fluxcpp {

Context::Context(const KeyValueStore& store, int world_size, int rank, const ContextOptions& options) {
  ContextOptions o = options;
  const std::string error = resolve_host_grouping(o);
  impl_ = std::make_shared<detail::ContextImpl>(store, world_size, rank, o, error);
}

}  // namespace fluxcpp
