// What PyPI's static oneCCL (oneccl-cpu-devel's lib/ccl/cpu/lib/libccl.a, built by Intel's
// compiler) expects from Intel's runtime libraries that the wheels do not ship: libirc's
// _intel_fast_memcpy / _intel_fast_memset (plain memcpy / memset here) and the ITT
// instrumentation's function pointers, which ittnotify's macros call only when non-null (null
// here: no profiler attached). Its shared libccl.so cannot be used instead: it needs a
// libccl.so.2 that no wheel holds.
#include <cstddef>
#include <cstring>

extern "C" {
void* _intel_fast_memcpy(void* dst, const void* src, std::size_t n) {
  return std::memcpy(dst, src, n);
}
void* _intel_fast_memset(void* dst, int c, std::size_t n) { return std::memset(dst, c, n); }

void* __itt_domain_create_ptr__3_0 = nullptr;
void* __itt_string_handle_create_ptr__3_0 = nullptr;
void* __itt_task_begin_ptr__3_0 = nullptr;
void* __itt_task_end_ptr__3_0 = nullptr;
void* __itt_metadata_add_ptr__3_0 = nullptr;
void* __itt_thread_set_name_ptr__3_0 = nullptr;
void* __itt_event_create_ptr__3_0 = nullptr;
void* __itt_event_start_ptr__3_0 = nullptr;
void* __itt_event_end_ptr__3_0 = nullptr;
}
