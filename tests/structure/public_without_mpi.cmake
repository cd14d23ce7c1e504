# Checks that the public headers of a program that makes its contexts without MPI compile with no
# <mpi.h> at hand: every C++ header but fluxcpp/context_mpi.hpp and the umbrella fluxcpp.hpp,
# and the C ABI's fluxcpp.h with FLUXCPP_NO_MPI defined, compiled as C++17 and as C99 with a
# directory holding an mpi.h that #errors first on the include path. And that the check can
# fail: the headers that do bring MPI (fluxcpp.h without FLUXCPP_NO_MPI, context_mpi.hpp,
# fluxcpp.hpp) must hit that mpi.h.
# Inputs: INCLUDE_DIR (include/ of the source tree), WORK (a scratch directory of the build
# tree), CC and CXX (the compilers).
cmake_minimum_required(VERSION 3.20)
file(MAKE_DIRECTORY ${WORK}/poison)
file(WRITE ${WORK}/poison/mpi.h "#error \"<mpi.h> reached\"\n")

# Compiles `source` (written to WORK/name) with `compiler` and `flags`; sets ${out_rc} to the
# exit code and ${out_err} to the diagnostics.
function(compile name compiler flags source out_rc out_err)
  file(WRITE ${WORK}/${name} "${source}")
  execute_process(COMMAND ${compiler} ${flags} -fsyntax-only -I${WORK}/poison -I${INCLUDE_DIR}
                          ${WORK}/${name}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_err} "${out}${err}" PARENT_SCOPE)
endfunction()

set(problems "")
file(GLOB cxx_headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/fluxcpp/*.hpp)
set(cxx_source "")
foreach(h IN LISTS cxx_headers)
  if(NOT h MATCHES "fluxcpp/(context_mpi|fluxcpp)\\.hpp$")
    string(APPEND cxx_source "#include <${h}>\n")
  endif()
endforeach()
# What such a program does: a context from an id or a store.
string(APPEND cxx_source
       "int fluxcpp_no_mpi(const fluxcpp::UniqueId& id) {\n"
       "  fluxcpp::Context ctx(id, 1, 0);\n"
       "  return ctx.rank();\n"
       "}\n")
compile(no_mpi.cpp ${CXX} "-std=c++17" "${cxx_source}" rc err)
if(NOT rc EQUAL 0)
  list(APPEND problems "the public C++ headers without context_mpi.hpp need <mpi.h>:\n${err}")
endif()
set(c_source "#define FLUXCPP_NO_MPI\n#include <fluxcpp/fluxcpp.h>\n"
             "int fluxcpp_no_mpi(fluxcpp_unique_id_t* id) {\n"
             "  fluxcpp_context_t ctx;\n"
             "  return (int)fluxcpp_context_create_from_id(id, 1, 0, NULL, &ctx);\n"
             "}\n")
compile(no_mpi.c ${CC} "-std=c99" "${c_source}" rc err)
if(NOT rc EQUAL 0)
  list(APPEND problems "fluxcpp.h with FLUXCPP_NO_MPI needs <mpi.h>:\n${err}")
endif()

# The headers that bring MPI reach the poisoned mpi.h: the check sees <mpi.h> when it is there.
foreach(probe "fluxcpp.h;c;-std=c99;${CC}" "fluxcpp.h;cpp;-std=c++17;${CXX}"
              "context_mpi.hpp;cpp;-std=c++17;${CXX}" "fluxcpp.hpp;cpp;-std=c++17;${CXX}")
  list(GET probe 0 h)
  list(GET probe 1 ext)
  list(GET probe 2 std)
  list(GET probe 3 compiler)
  compile(with_mpi_${h}.${ext} ${compiler} "${std}" "#include <fluxcpp/${h}>\n" rc err)
  if(rc EQUAL 0 OR NOT err MATCHES "<mpi.h> reached")
    list(APPEND problems "fluxcpp/${h} (as ${ext}) did not reach the poisoned mpi.h: the check "
                         "cannot see <mpi.h>:\n${err}")
  endif()
endforeach()

if(problems)
  list(JOIN problems "\n" report)
  message(FATAL_ERROR "${report}")
endif()
list(LENGTH cxx_headers n)
message(STATUS "public headers without <mpi.h>: ${n} C++ headers but context_mpi.hpp and "
               "fluxcpp.hpp, fluxcpp.h with FLUXCPP_NO_MPI (C99 and C++17); the MPI ones reach it")
