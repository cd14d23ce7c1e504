# Fails if /dev/shm holds a fluxcpp segment that its creator left behind: a name
# "fluxcpp-<pid>-..." whose process no longer runs (a running one still owns its segment: the
# sanitizer tests that scripts/test.sh runs beside the suite, another job of this user), and that
# no live process holds under its liveness lock (fault.shm_neighbours' name squatter takes names
# of pids near those it sees, dead ones included: segments.cmake).
# A dead process's segment may be in the middle of its cleanup by a test that runs beside this
# check (scripts/test.sh runs the sanitizer subsets, and their check, beside the main suite,
# whose failure model kills ranks and lets the survivors remove what they left): such names are
# looked at again for up to 60 s, and only those still there fail the check.
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST), in a script run by cmake -P
include(${CMAKE_CURRENT_LIST_DIR}/segments.cmake)
function(fluxcpp_left_segments out)
  file(GLOB entries /dev/shm/*fluxcpp*)
  set(left "")
  foreach(e IN LISTS entries)
    get_filename_component(name "${e}" NAME)
    # (The match first, on its own: in one if() ${CMAKE_MATCH_1} would be expanded before the
    # MATCHES sets it, i.e. from the previous name, or empty: /proc/ exists.)
    if(name MATCHES "^fluxcpp-([0-9]+)-")
      if(EXISTS "/proc/${CMAKE_MATCH_1}")
        continue()
      endif()
    endif()
    fluxcpp_segment_held(held "${e}")
    if(NOT held)
      list(APPEND left "${e}")
    endif()
  endforeach()
  set(${out} "${left}" PARENT_SCOPE)
endfunction()

fluxcpp_left_segments(left)
set(first "${left}")
set(waited 0)
while(left AND waited LESS 60)
  execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1)
  math(EXPR waited "${waited} + 1")
  fluxcpp_left_segments(now)
  # Only the names seen at first and still there count: new ones belong to tests running now.
  set(still "")
  foreach(e IN LISTS left)
    if(e IN_LIST now)
      list(APPEND still "${e}")
    endif()
  endforeach()
  set(left "${still}")
endwhile()
if(left)
  message(FATAL_ERROR "fluxcpp segments left in /dev/shm (still there after ${waited} s): ${left}")
endif()
if(first)
  list(LENGTH first n)
  message(STATUS "/dev/shm: ${n} segment(s) of dead processes went away within ${waited} s "
                 "(a test beside this check was cleaning up); none left behind")
else()
  message(STATUS "/dev/shm holds no fluxcpp segment left behind")
endif()
