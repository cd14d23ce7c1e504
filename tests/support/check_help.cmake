# One program's --help, run without mpirun: it must exit 0 and print a usage text (first line
# "usage: ..." on stdout) instead of running. FORBID, when set, is a regular expression the text
# must not match (e.g. a printf conversion printed instead of a literal '%').
# Inputs: EXE, and optionally FORBID.
cmake_minimum_required(VERSION 3.20)
execute_process(COMMAND ${EXE} --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --help exited with ${rc}\n${out}\n${err}")
endif()
if(NOT out MATCHES "^usage: ")
  message(FATAL_ERROR "${EXE} --help printed no usage text on stdout:\n${out}\n${err}")
endif()
if(DEFINED FORBID AND out MATCHES "${FORBID}")
  message(FATAL_ERROR "${EXE} --help printed '${CMAKE_MATCH_0}':\n${out}")
endif()
message(STATUS "${out}")
