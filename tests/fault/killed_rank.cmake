# Runs killed_rank on 3 ranks: rank 2 dies; ranks 0 and 1 must both report PASS, and /dev/shm
# must hold no fluxcpp segment afterwards. mpirun's own exit status is ignored (a rank died).
string(TIMESTAMP started "%s" UTC)
execute_process(COMMAND ${MPIEXEC} -np 3 ${FLAGS} --mca orte_abort_on_non_zero_status 0 ${EXE}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
message(STATUS "${out}")
string(REGEX MATCHALL "killed_rank: rank [01] PASS" passes "${out}")
list(LENGTH passes npass)
if(NOT npass EQUAL 2)
  message(FATAL_ERROR "expected 2 survivors to PASS, got ${npass} (mpirun rc ${rc})\n${out}\n${err}")
endif()
# Segments of this job only (tests/support/segments.cmake says which count): other jobs may run meanwhile.
string(REGEX MATCHALL "killed_rank: pid [0-9]+" pid_lines "${out}")
list(LENGTH pid_lines npids)
if(NOT npids EQUAL 3)
  message(FATAL_ERROR "expected 3 ranks to report their pid, got ${npids}\n${out}")
endif()
string(REGEX REPLACE "killed_rank: pid " "" pids "${pid_lines}")
# Whatever happened, no rank outlives the test (a survivor that hangs after PASS, say).
execute_process(COMMAND kill -KILL ${pids} OUTPUT_QUIET ERROR_QUIET)
include(${CMAKE_CURRENT_LIST_DIR}/../support/segments.cmake)
fluxcpp_job_leftovers(left ${started} ${pids})
if(left)
  message(FATAL_ERROR "fluxcpp segments left in /dev/shm by the job (pids ${pids}): ${left}")
endif()
