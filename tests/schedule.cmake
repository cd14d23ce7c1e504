# Included at the end of tests/CMakeLists.txt, once every test is registered.
#
# Scheduling. scripts/test.sh runs ctest -j (2 x cores): a test's PROCESSORS is the ranks, or
# threads, it runs (CTest caps it at the -j level), so tests run together only while their ranks
# fit in twice the cores, the oversubscription a W = 4 test already has on its own. Tests that
# set no PROCESSORS run one rank or thread. The shaped link (link.*) runs alone: it times a link.
# The failure model (label fault) runs one test at a time (RESOURCE_LOCK: its tests kill and stop
# ranks, sweep /dev/shm and time deadlines), beside the other tests: its tests mostly wait on
# timeouts of 1.5 s, and their checks have seconds of slack. (Run alone, its ~200 s left the
# machine 50-80 % idle at the end of the suite.)
set(_fluxcpp_two_cores kernels.gemm inplace_cast.kernels comm.shm_group from_id_capi
    cmake.options_off python.install python.store_faults python.store_identity
    python.readme_store)
get_property(_fluxcpp_tests DIRECTORY PROPERTY TESTS)
foreach(t IN LISTS _fluxcpp_tests)
  get_test_property(${t} LABELS _labels)
  if(t MATCHES "^link\\.")
    set_tests_properties(${t} PROPERTIES RUN_SERIAL TRUE)
  elseif(_labels MATCHES "fault")
    # PROCESSORS 1: mostly waiting. COST: started early, so that their chain (one at a time,
    # ~200 s) is not what the suite waits for at the end.
    set_tests_properties(${t} PROPERTIES RESOURCE_LOCK fluxcpp_failure_model PROCESSORS 1
                         COST 20)
  endif()
  if(t IN_LIST _fluxcpp_two_cores OR t MATCHES "^(consumer|readme)\\.")
    set_tests_properties(${t} PROPERTIES PROCESSORS 2)
  endif()
endforeach()

# A fresh build tree has no timings yet (CTest keeps them in Testing/Temporary/CTestCostData.txt),
# and CTest then starts tests in the order they were added: the longest, added last, ran on at the
# end beside nothing else. COST (about their seconds on a quiet 2-core machine) starts them first.
set(_fluxcpp_costs readme.mpirun 60 kernels.gemm 45 consumer.add_subdirectory 30
    torch_backend.suite.np2 15 torch_backend.suite.hosts2.np2 15 python.readme_torchrun 12
    torch_backend.torchrun.np2 10 cmake.options_off 8)
while(_fluxcpp_costs)
  list(POP_FRONT _fluxcpp_costs _t _cost)
  if(TEST ${_t})
    set_tests_properties(${_t} PROPERTIES COST ${_cost})
  endif()
endwhile()

# Label full: repeats that add no path the default run lacks (docs/testing.md lists each, with
# the default test that covers its path); scripts/test.sh --full runs them too.
#  * one host at W = 4 where W = 2 and 3 run the same code on one host and W = 4 runs again as two
#    simulated hosts of 2 (<op>.np4.hosts2);
#  * the examples at W = 4 (they run at W = 1 and 2, and through README.md's mpirun lines);
#  * consumer.fetchcontent: the embedded build of consumer.add_subdirectory, from a tarball;
#  * readme.mpirun_full: the README's benchmark line (readme.mpirun runs every other line);
#  * the Python op tests started without MPI at W = 3 (python.ops.store.np3: .store.np2 runs the
#    same launch, and python.ops.np3 the same scripts at W = 3 under mpirun);
#  * two comm streams with copy offload (<op>.np4.hosts2.offload2: .hosts2.offload runs one).
set(_fluxcpp_full consumer.fetchcontent readme.mpirun_full python.ops.store.np3)
foreach(op ag_gemm gemm_rs a2a_gemm ulysses)
  list(APPEND _fluxcpp_full ${op}.np4.hosts2.offload2)
endforeach()
foreach(op all_gather ag_gemm reduce_scatter all_reduce gemm_rs gemm_ar all_to_all_single a2a_gemm
           ulysses zero_copy moe_dispatch moe_combine ag_scatter_grouped_gemm
           grouped_gemm_gather_rs async_send_recv)
  list(APPEND _fluxcpp_full ${op}.np4)
endforeach()
if(FLUXCPP_BUILD_EXAMPLES)
  list(APPEND _fluxcpp_full example.ulysses.np4 example.pipeline.np4 example.moe_ffn.np4
       example.moe_tp.np4)
endif()
foreach(t IN LISTS _fluxcpp_full)
  if(NOT TEST ${t})  # the Python tests exist only where the test interpreter has torch
    continue()
  endif()
  get_test_property(${t} LABELS _labels)
  if(NOT _labels)
    set(_labels "")
  endif()
  list(APPEND _labels full)
  set_tests_properties(${t} PROPERTIES LABELS "${_labels}")
endforeach()
