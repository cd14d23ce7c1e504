# Configures the project (configure and generate only) with each FLUXCPP_BUILD_* option off in
# turn, so that no part of the build refers to a target another option removed.
# -DSRC=<source dir> -DWORK=<scratch dir>
foreach(option FLUXCPP_BUILD_EXAMPLES FLUXCPP_BUILD_BENCH FLUXCPP_BUILD_TESTS)
  set(dir ${WORK}/${option})
  file(REMOVE_RECURSE ${dir})
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${dir} -D${option}=OFF
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring with ${option}=OFF failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${option}=OFF configures")
  file(REMOVE_RECURSE ${dir})
endforeach()
