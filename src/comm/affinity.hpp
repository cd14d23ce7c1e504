// Optional thread binding through hwloc.
#pragma once

#include <string>

#include "comm/config.hpp"

namespace fluxcpp::comm {

// Binds the calling thread to core `index` (modulo the cores) of the process's cpuset.
// Best effort: failure is logged, not raised.
void bind_current_thread(Binding binding, int index);

// The process's cpuset as a list ("0-3"), and the number of CPUs in it.
std::string process_cpuset();
int process_cpu_count();

}  // namespace fluxcpp::comm
