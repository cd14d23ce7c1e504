#include "comm/affinity.hpp"

#include <hwloc.h>
#include <sched.h>

#include <mutex>

#include "log.hpp"

namespace fluxcpp::comm {

namespace {

// One topology per process, loaded on first use (loading costs milliseconds).
hwloc_topology_t topology() {
  static std::once_flag once;
  static hwloc_topology_t topo = nullptr;
  std::call_once(once, [] {
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) topo = nullptr;
  });
  return topo;
}

}  // namespace

void bind_current_thread(Binding binding, int index) {
  if (binding == Binding::kNone) return;
  hwloc_topology_t topo = topology();
  if (topo == nullptr) {
    FLUXCPP_LOG_WARN("affinity: hwloc topology unavailable, threads stay unbound");
    return;
  }
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0)
    hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(topo));
  int ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
  if (ncores > 0) {
    hwloc_obj_t core =
        hwloc_get_obj_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE, index % ncores);
    if (core == nullptr || hwloc_set_cpubind(topo, core->cpuset, HWLOC_CPUBIND_THREAD) != 0)
      FLUXCPP_LOG_WARN("affinity: cannot bind thread {} to core {}", index, index % ncores);
  }
  hwloc_bitmap_free(set);
}

int process_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

std::string process_cpuset() {
  hwloc_topology_t topo = topology();
  if (topo == nullptr) return "?";
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  std::string out = "?";
  if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
    char* s = nullptr;
    if (hwloc_bitmap_list_asprintf(&s, set) >= 0 && s != nullptr) {
      out = s;
      free(s);
    }
  }
  hwloc_bitmap_free(set);
  return out;
}

}  // namespace fluxcpp::comm
