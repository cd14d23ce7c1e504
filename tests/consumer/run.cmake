# One consumer test: builds a project that uses fluxcpp the way MODE says, then runs its programs
# on 2 ranks (they check their own results). The modes that need an installed fluxcpp install
# the build tree BUILD_DIR into WORK/prefix first.
#   find_package      tests/consumer, a C and C++ project, through the installed CMake package
#   find_package_cxx  tests/consumer with C++ alone
#   find_package_c    tests/consumer_c, a C-only project
#   find_package_no_minimum  tests/consumer_no_minimum, a C project without cmake_minimum_required
#   pkg_config        tests/consumer/main.c built with CC $(pkg-config --cflags --libs fluxcpp)
#   add_subdirectory  tests/consumer_embed adding the source tree ROOT
#   fetchcontent      tests/consumer_embed fetching a file:// tarball of ROOT's library sources
# Inputs: MODE ROOT BUILD_DIR WORK MPIEXEC FLAGS LIBDIR CC PKG_CONFIG.
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK}/prefix)
set(programs consumer_c consumer_cpp)
# The embedded builds are the library's third and fourth compilation in the suite: no build type
# (no optimisation) and a unity build of the library (FLUXCPP_UNITY_BUILD) keep them short; the
# programs run tiny shapes.
set(configure_args -DCMAKE_BUILD_TYPE= -DFLUXCPP_UNITY_BUILD=ON)
if(MODE MATCHES "^find_package")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  set(configure_args -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
  set(source ${ROOT}/tests/consumer)
  if(MODE STREQUAL "find_package_cxx")
    list(APPEND configure_args -DFLUXCPP_CONSUMER_LANGUAGES=CXX)
    set(programs consumer_cpp)
  elseif(MODE STREQUAL "find_package_c")
    set(source ${ROOT}/tests/consumer_c)
    set(programs consumer_c)
  elseif(MODE STREQUAL "find_package_no_minimum")
    set(source ${ROOT}/tests/consumer_no_minimum)
    set(programs consumer_c)
  endif()
elseif(MODE STREQUAL "add_subdirectory")
  set(source ${ROOT}/tests/consumer_embed)
  list(APPEND configure_args -DFLUXCPP_EMBED=add_subdirectory -DFLUXCPP_SOURCE_DIR=${ROOT})
elseif(MODE STREQUAL "fetchcontent")
  # What a release tarball holds for the library (with its Python module and the torch backend);
  # tests, bench and examples are left out, so the build fails if the embedded project tries to
  # add them.
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar czf ${WORK}/fluxcpp-src.tar.gz
                          CMakeLists.txt cmake include src python backend
                  WORKING_DIRECTORY ${ROOT} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "could not pack the sources of ${ROOT}")
  endif()
  set(source ${ROOT}/tests/consumer_embed)
  list(APPEND configure_args -DFLUXCPP_EMBED=fetchcontent -DFLUXCPP_URL=file://${WORK}/fluxcpp-src.tar.gz)
elseif(MODE STREQUAL "pkg_config")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
  run(${PKG_CONFIG} --validate fluxcpp)
  run(${PKG_CONFIG} --cflags --libs fluxcpp)
  file(REAL_PATH ${prefix} real_prefix)
  string(REGEX MATCH "-I([^ \n]*)" include_flag "${run_output}")
  file(REAL_PATH "${CMAKE_MATCH_1}" include_dir)
  if(NOT include_dir STREQUAL "${real_prefix}/include")
    message(FATAL_ERROR "pkg-config points at ${include_dir}, not at ${real_prefix}/include")
  endif()
  # The command users type, run by a shell.
  file(MAKE_DIRECTORY ${WORK}/build)
  run(sh -c "\"$1\" -std=c99 -o \"$2\" \"$3\" $(\"$4\" --cflags --libs fluxcpp)" sh
      ${CC} ${WORK}/build/consumer_c ${ROOT}/tests/consumer/main.c ${PKG_CONFIG})
  set(programs consumer_c)
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

if(NOT MODE STREQUAL "pkg_config")
  run(${CMAKE_COMMAND} -S ${source} -B ${WORK}/build ${configure_args})
  # Only the programs it runs (and what they link): an embedded build would otherwise also make
  # the Python module and the torch backend, whose torch headers are most of its compile time.
  run(${CMAKE_COMMAND} --build ${WORK}/build --parallel 2 --target ${programs})
endif()
set(ENV{LD_LIBRARY_PATH} "${prefix}/${LIBDIR}:$ENV{LD_LIBRARY_PATH}")
foreach(program IN LISTS programs)
  run(${MPIEXEC} -np 2 ${FLAGS} ${WORK}/build/${program})
endforeach()
