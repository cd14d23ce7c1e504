# What a test's leftover check may count as left behind in /dev/shm (cmake -P helpers).

# fluxcpp_segment_held(<out> <path>): <out> is TRUE when a live process holds the segment's
# liveness lock (flock, src/shm/liveness.hpp): its creator, a fork child of it, or a process that
# took the name for itself, like the name squatter of fault.shm_neighbours. FALSE when nobody
# holds it or it was removed meanwhile. Opened without O_CREAT (flock(1) given a path would make
# a missing one).
function(fluxcpp_segment_held out path)
  execute_process(COMMAND sh -c "exec 9<\"$1\" || exit 3; flock -n -x 9" sh "${path}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 1)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# fluxcpp_job_leftovers(<out> <started> <pid>...): the /dev/shm segments a finished job left
# behind, for the leftover checks of tests/fault (fault.cmake, killed_rank.cmake). A segment
# counts when
#   - its name carries one of the job's pids ("fluxcpp-<pid>-..."), and
#   - it was made at or after <started> (epoch seconds): an older one is another process's that
#     had the same pid before (pids wrap on a busy machine: 32768 here), and
#   - no live process holds its liveness lock (flock, src/shm/liveness.hpp) once the job's
#     processes are gone: a held one belongs to a live process outside the job. The name
#     squatter of fault.shm_neighbours does exactly that (it takes the names of pids near every
#     name it sees in /dev/shm), and the sanitizer subset runs beside the suite.
# Waits up to 10 s for the pids to be gone (a SIGKILLed rank closes its files as it exits);
# a pid still running then is an error (its live segments would pass for another process's).
# Names counted are looked at again a second later: one a creator made and was about to lock
# when the probe took the lock (shm/segment.cpp then removes it) is gone by then.
function(fluxcpp_job_leftovers out started)
  foreach(pid ${ARGN})
    set(gone FALSE)
    foreach(i RANGE 100)
      # Read through cat: the process may be reaped between a check and a read.
      execute_process(COMMAND cat /proc/${pid}/status OUTPUT_VARIABLE st RESULT_VARIABLE rc
                      ERROR_QUIET)
      # A zombie whose threads are all gone has closed its files (its leader may turn zombie
      # while other threads still hold them).
      if(NOT rc EQUAL 0 OR (st MATCHES "State:[ \t]+[ZX]" AND st MATCHES "Threads:[ \t]+[01]\n"))
        set(gone TRUE)
        break()
      endif()
      execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 0.1)
    endforeach()
    if(NOT gone)
      message(FATAL_ERROR "pid ${pid} of the job still runs 10 s after the job ended")
    endif()
  endforeach()
  set(left "")
  foreach(pid ${ARGN})
    file(GLOB found /dev/shm/*fluxcpp-${pid}-*)
    foreach(f ${found})
      file(TIMESTAMP "${f}" made "%s" UTC)
      if(NOT made STREQUAL "" AND made LESS started)
        continue()
      endif()
      fluxcpp_segment_held(held "${f}")
      if(NOT held AND EXISTS "${f}")
        list(APPEND left "${f}")
      endif()
    endforeach()
  endforeach()
  if(left)
    execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1)
    set(still "")
    foreach(f ${left})
      fluxcpp_segment_held(held "${f}")
      if(NOT held AND EXISTS "${f}")
        list(APPEND still "${f}")
      endif()
    endforeach()
    set(left "${still}")
  endif()
  set(${out} "${left}" PARENT_SCOPE)
endfunction()
