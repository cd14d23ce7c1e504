# Fails if /dev/shm holds a fluxcpp segment that its creator left behind: a name
# "fluxcpp-<pid>-..." whose process no longer runs (a running one still owns its segment: the
# sanitizer tests that scripts/test.sh runs beside the suite, another job of this user).
file(GLOB entries /dev/shm/*fluxcpp*)
set(left "")
foreach(e IN LISTS entries)
  get_filename_component(name "${e}" NAME)
  if(name MATCHES "^fluxcpp-([0-9]+)-" AND EXISTS "/proc/${CMAKE_MATCH_1}")
    continue()
  endif()
  list(APPEND left "${e}")
endforeach()
if(left)
  message(FATAL_ERROR "fluxcpp segments left in /dev/shm: ${left}")
endif()
message(STATUS "/dev/shm holds no fluxcpp segment left behind")
