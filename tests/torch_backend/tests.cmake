# The torch.distributed backend "fluxcpp" (backend/, docs/torch_backend.md): registered when
# the build made fluxcpp/_c10d.so. Included from tests/CMakeLists.txt inside the Python tests'
# block (_py_env, FLUXCPP_TEST_PYTHON).
# (No return(): in an included file it would leave tests/CMakeLists.txt.)
if(NOT FLUXCPP_HAVE_TORCH_BACKEND)
  message(STATUS "fluxcpp: torch.distributed backend tests not registered (backend not built)")
else()
set(_tb ${CMAKE_CURRENT_SOURCE_DIR}/torch_backend)
# Every collective, dtype and ReduceOp against exact references; async, groups, p2p, errors,
# Context.from_group, DDP against gloo (test_backend.py), ranks from multiprocessing.
foreach(np 2 3)
  add_test(NAME torch_backend.collectives.np${np}
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/spawn.py -np ${np}
                   ${_tb}/test_backend.py)
  set_tests_properties(torch_backend.collectives.np${np} PROPERTIES TIMEOUT 300 PROCESSORS ${np}
                       ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
endforeach()
# The same on 2 simulated hosts whose ranks meet over the library's TCP channel (spawn.py
# --hosts 2): 2 hosts x 1 rank and 2 hosts x 2 ranks (its 3-rank subgroups: every rank a host).
foreach(np 2 4)
  add_test(NAME torch_backend.collectives.hosts2.np${np}
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/spawn.py -np ${np}
                   --hosts 2 ${_tb}/test_backend.py)
  set_tests_properties(torch_backend.collectives.hosts2.np${np} PROPERTIES TIMEOUT 300
                       PROCESSORS ${np} ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
endforeach()
# Real torchrun running a plain dist.* + DDP script with "fluxcpp" and with gloo: same results.
add_test(NAME torch_backend.torchrun.np2 COMMAND ${FLUXCPP_TEST_PYTHON} ${_tb}/test_torchrun.py 2)
set_tests_properties(torch_backend.torchrun.np2 PROPERTIES TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
# torchrun --nnodes 2 with no MPI anywhere (two agents, one per simulated host): the Llama
# example's fused layers (context from the job's store) and its dist.all_reduce over "fluxcpp",
# against one rank; 2 hosts x 1 rank (np2) and 2 hosts x 2 ranks (np4).
foreach(per_host 1 2)
  math(EXPR np "2 * ${per_host}")
  add_test(NAME torch_backend.torchrun.hosts2.np${np}
           COMMAND ${FLUXCPP_TEST_PYTHON} ${_tb}/test_torchrun_hosts.py ${per_host})
  set_tests_properties(torch_backend.torchrun.hosts2.np${np} PROPERTIES TIMEOUT 300
                       PROCESSORS ${np} ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
endforeach()
# The Llama example's torch backend with dist.all_reduce over "fluxcpp" under mpirun (the
# backend's context still comes from torch's store: no MPI in the backend) against its one-rank
# model.
add_test(NAME torch_backend.llama.np2
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${FLUXCPP_MPIEXEC_FLAGS}
                 ${FLUXCPP_TEST_PYTHON} ${_tb}/test_llama_dist.py)
set_tests_properties(torch_backend.llama.np2 PROPERTIES TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
# The same on 2 simulated hosts of one rank (FLUXCPP_BACKEND_RANKS_PER_NODE: the context's
# ranks_per_host): the group's legs between hosts go over the TCP channel.
add_test(NAME torch_backend.llama.np2.hosts2
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${FLUXCPP_MPIEXEC_FLAGS}
                 ${FLUXCPP_TEST_PYTHON} ${_tb}/test_llama_dist.py)
set_tests_properties(torch_backend.llama.np2.hosts2 PROPERTIES TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${_py_env};FLUXCPP_BACKEND_RANKS_PER_NODE=1"
                     FIXTURES_REQUIRED fluxcpp_shm_clean)
# The README's torchrun block, as written.
add_test(NAME torch_backend.readme.np2 COMMAND ${FLUXCPP_TEST_PYTHON}
         ${CMAKE_CURRENT_SOURCE_DIR}/python/readme_torchrun.py ${PROJECT_SOURCE_DIR}/README.md
         "torch.distributed backend")
set_tests_properties(torch_backend.readme.np2 PROPERTIES TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
# A rank killed under multiprocessing, a rank stopped under torchrun: RuntimeError naming it
# within the timeout, nothing left in /dev/shm.
add_test(NAME torch_backend.faults.kill COMMAND ${FLUXCPP_TEST_PYTHON} ${_tb}/test_faults.py
         --launcher mp --fault kill)
add_test(NAME torch_backend.faults.stop_torchrun COMMAND ${FLUXCPP_TEST_PYTHON}
         ${_tb}/test_faults.py --launcher torchrun --fault stop)
set_tests_properties(torch_backend.faults.kill torch_backend.faults.stop_torchrun PROPERTIES
                     TIMEOUT 200 LABELS fault PROCESSORS 3 ENVIRONMENT "${_py_env}"
                     FIXTURES_REQUIRED fluxcpp_shm_clean)
# PyTorch's own suite (dist_suite.py): the CI subset here; scripts/torch_suite.sh runs it whole.
set(_suite_subset -k test_all_reduce_sum -k test_all_reduce_max -k test_all_reduce_min
    -k test_all_reduce_product -k test_all_reduce_coalesced -k test_broadcast -k test_reduce_sum
    -k test_all_gather -k test_gather -k test_scatter -k test_send_recv -k test_barrier
    -k test_new_subgroups -k test_DistributedDataParallel_requires_grad -k test_ddp_comm_hook)
add_test(NAME torch_backend.suite.np2
         COMMAND ${FLUXCPP_TEST_PYTHON} ${_tb}/dist_suite.py ${_suite_subset})
set_tests_properties(torch_backend.suite.np2 PROPERTIES TIMEOUT 600 PROCESSORS 2
                     ENVIRONMENT "${_py_env};BACKEND=fluxcpp;WORLD_SIZE=2"
                     FIXTURES_REQUIRED fluxcpp_shm_clean)
# The same subset on 2 simulated hosts of one rank: every group over the TCP channel.
add_test(NAME torch_backend.suite.hosts2.np2
         COMMAND ${FLUXCPP_TEST_PYTHON} ${_tb}/dist_suite.py ${_suite_subset})
set_tests_properties(torch_backend.suite.hosts2.np2 PROPERTIES TIMEOUT 600 PROCESSORS 2
                     ENVIRONMENT "${_py_env};BACKEND=fluxcpp;WORLD_SIZE=2;DIST_SUITE_HOSTS=2"
                     FIXTURES_REQUIRED fluxcpp_shm_clean)
# PyTorch's tensor parallelism (DTensor: parallelize_module over init_device_mesh("cpu", (2,)))
# over "fluxcpp": forward and gradients bitwise equal to gloo's, close to one rank's; the
# functional collectives against exact references.
add_test(NAME torch_backend.dtensor.np2 COMMAND ${FLUXCPP_TEST_PYTHON} ${_tb}/test_dtensor.py 2)
set_tests_properties(torch_backend.dtensor.np2 PROPERTIES TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
# README.md's Hugging Face recipe as written: a small random Llama (save_pretrained, no
# download) loaded with from_pretrained(tp_plan="auto") under torchrun on "fluxcpp" and on gloo:
# greedy tokens equal to one process's and gloo's, first-step logits bitwise gloo's.
add_test(NAME torch_backend.hf_tp.np2 COMMAND ${FLUXCPP_TEST_PYTHON} ${_tb}/test_hf_tp.py
         ${PROJECT_SOURCE_DIR}/README.md)
set_tests_properties(torch_backend.hf_tp.np2 PROPERTIES TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
endif()
