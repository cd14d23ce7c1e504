# Runs abandoned_test (-DEXE, -DNP ranks, -DSCENARIO) -DRUNS times under mpirun: every run must
# exit 0 with every rank back from MPI_Finalize ("abandoned: rank R finalized"), within a bound.
foreach(i RANGE 1 ${RUNS})
  execute_process(COMMAND ${MPIEXEC} -np ${NP} ${FLAGS} ${EXE} ${SCENARIO}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
  string(REGEX MATCHALL "abandoned: rank [0-9]+ finalized\n" fins "${out}")
  list(LENGTH fins nfin)
  if(NOT rc EQUAL 0 OR NOT nfin EQUAL NP)
    message(FATAL_ERROR "run ${i}: mpirun rc ${rc}, ${nfin} of ${NP} ranks back from MPI_Finalize\n${out}\n${err}")
  endif()
endforeach()
message(STATUS "${RUNS} runs of ${NP} ranks: every rank back from MPI_Finalize")
