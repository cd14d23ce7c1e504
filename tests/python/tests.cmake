# The Python module's tests (tests/python, docs/python.md) and the torch.distributed backend's
# (tests/torch_backend): included from tests/CMakeLists.txt, which set FLUXCPP_TEST_PYTHON and
# _py_why (why the interpreter cannot run them; empty when it can).
# (No return(): in an included file it would leave tests/CMakeLists.txt.)
if(_py_why)
  message(STATUS "fluxcpp: Python tests (but python.signatures) not registered: ${_py_why}")
else()
  message(STATUS "fluxcpp: Python tests registered (${FLUXCPP_TEST_PYTHON})")
  # torch.compile's cache in the build tree, not /tmp/torchinductor_<user> (left behind otherwise).
  set(_py_env "PYTHONPATH=${PROJECT_BINARY_DIR}/python:${CMAKE_CURRENT_SOURCE_DIR}/python"
              "OMP_NUM_THREADS=1" "PYTHONDONTWRITEBYTECODE=1"
              "TORCHINDUCTOR_CACHE_DIR=${PROJECT_BINARY_DIR}/torchinductor"
              "FLUXCPP_TEST_TMPDIR=${PROJECT_BINARY_DIR}/test-tmp")
  # The op tests (tests/python/test_<t>.py) against torch's unfused path, run in batches: one
  # launch and one interpreter per rank for every script of a layout (tests/python/batch.py; each
  # script still runs alone as `mpirun -np N python3 tests/python/test_<t>.py`). A batch runs every
  # script, names each with its status, and fails when one does. python.ops.* runs:
  #  * np2, np3: under mpirun, every op test, the tensor-parallel layers with replicated
  #    activations (test_tp_layers.py), the layers under torch.compile(fullgraph=True) against
  #    eager (test_compile.py), a Hugging Face Llama's linears swapped for them (test_swap.py),
  #    the Llama example python/examples/llama_tp.py against its one-rank model
  #    (test_llama_tp.py), and the examples sp_mlp.py and moe_ep.py (their own
  #    checks against one rank pass, and fail with status 1 on a corrupted weight:
  #    test_examples.py);
  #  * store.np2 (store.np3 in label full): every rank started by Python multiprocessing and no
  #    MPI at all (tests/python/spawn.py: the context comes from Context.from_store over a
  #    FileStore);
  #  * hosts2.np2, hosts2.np4: 2 simulated hosts (spawn.py --hosts 2: FLUXCPP_HOST_ID tells them
  #    apart), whose ranks meet over the library's TCP channel (gloo) on the loopback: 2 hosts x 1
  #    rank and 2 hosts x 2 ranks, against the same references.
  set(_py_ops dense a2a local misuse moe_ep autograd all_reduce gemm_ar tp_layers compile swap
              llama_tp examples)
  set(_py_store_ops dense a2a local moe_ep autograd all_reduce gemm_ar tp_layers compile)
  set(_py_hosts_ops dense a2a all_reduce gemm_ar tp_layers moe_ep)
  set(_py_batch ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/batch.py)
  function(fluxcpp_py_scripts out)
    set(_s "")
    foreach(t ${ARGN})
      list(APPEND _s ${CMAKE_CURRENT_SOURCE_DIR}/python/test_${t}.py)
    endforeach()
    set(${out} ${_s} PARENT_SCOPE)
  endfunction()
  fluxcpp_py_scripts(_py_ops_files ${_py_ops})
  fluxcpp_py_scripts(_py_store_files ${_py_store_ops})
  fluxcpp_py_scripts(_py_hosts_files ${_py_hosts_ops})
  foreach(np 2 3)
    add_test(NAME python.ops.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${FLUXCPP_MPIEXEC_FLAGS}
                     ${_py_batch} ${_py_ops_files})
    add_test(NAME python.ops.store.np${np}
             COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/spawn.py -np ${np}
                     --timeout 540 ${CMAKE_CURRENT_SOURCE_DIR}/python/batch.py ${_py_store_files})
  endforeach()
  foreach(np 2 4)
    add_test(NAME python.ops.hosts2.np${np}
             COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/spawn.py -np ${np}
                     --hosts 2 --timeout 540 ${CMAKE_CURRENT_SOURCE_DIR}/python/batch.py
                   ${_py_hosts_files})
  endforeach()
  # Three simulated hosts of one rank: a call's handshake payload travels in parts, a different
  # part to each host (an all-to-all's blocks, a reduce-scatter's shares).
  add_test(NAME python.ops.hosts3.np3
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/spawn.py -np 3
                   --hosts 3 --timeout 540 ${CMAKE_CURRENT_SOURCE_DIR}/python/batch.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/test_a2a.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/test_dense.py)
  foreach(t python.ops.np2 python.ops.np3 python.ops.store.np2 python.ops.store.np3
            python.ops.hosts2.np2 python.ops.hosts2.np4 python.ops.hosts3.np3)
    string(REGEX REPLACE ".*np" "" np "${t}")
    set_tests_properties(${t} PROPERTIES TIMEOUT 600 PROCESSORS ${np} ENVIRONMENT "${_py_env}"
                         FIXTURES_REQUIRED fluxcpp_shm_clean)
  endforeach()
  # The dense ops with the single-copy engine forced (host peers read each other's inputs in
  # place): an AllGather input inside another rank's block of the output is read until every
  # peer has its copy.
  add_test(NAME python.dense.np3.cma
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 ${FLUXCPP_MPIEXEC_FLAGS}
                   ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/batch.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/python/test_dense.py)
  set_tests_properties(python.dense.np3.cma PROPERTIES TIMEOUT 300 PROCESSORS 3
                       ENVIRONMENT "${_py_env};FLUXCPP_COPY_ENGINE=cma"
                       FIXTURES_REQUIRED fluxcpp_shm_clean)
  # AllReduce at W = 1: the sum of one rank, on the path without host peers. Part of the failure
  # model, one launch each: out-of-range and mistyped sizes through Python (test_sizes.py), a
  # multiprocessing child forked after create (test_fork.py).
  add_test(NAME python.all_reduce.np1
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 ${FLUXCPP_MPIEXEC_FLAGS}
                   ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_all_reduce.py)
  set_tests_properties(python.all_reduce.np1 PROPERTIES TIMEOUT 300 ENVIRONMENT "${_py_env}"
                       FIXTURES_REQUIRED fluxcpp_shm_clean PROCESSORS 1)
  foreach(t sizes fork)
    foreach(np 2 3)
      add_test(NAME python.${t}.np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${FLUXCPP_MPIEXEC_FLAGS}
                       ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_${t}.py)
      set_tests_properties(python.${t}.np${np} PROPERTIES TIMEOUT 120 ENVIRONMENT "${_py_env}"
                           FIXTURES_REQUIRED fluxcpp_shm_clean PROCESSORS ${np} LABELS fault)
    endforeach()
  endforeach()
  # The TCP channel's failure model in a network namespace of its own: a host's ranks killed, the
  # link cut before a call that then runs into it (tests/python/test_net_faults.py; root, for
  # unshare -n).
  add_test(NAME python.net_faults
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_net_faults.py)
  set_tests_properties(python.net_faults PROPERTIES TIMEOUT 300 LABELS fault PROCESSORS 2
                       ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
  # A stranger on the TCP channel (another local user reflecting, sending junk or silent on the
  # first connection to a pair's port): every rank fails the create, nobody aborts or pairs
  # (tests/python/test_tcp_stranger.py; root, for unshare -n; the ranks' connects held by the
  # fault injection's delay). In a network namespace of its own and with seconds of slack, it
  # runs beside other tests (not label fault, whose tests run alone).
  if(FLUXCPP_FAULT_INJECTION)
    add_test(NAME python.tcp_stranger
             COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_tcp_stranger.py)
    set_tests_properties(python.tcp_stranger PROPERTIES TIMEOUT 300 PROCESSORS 2
                         ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
    # A full /dev/shm on one of 2 simulated hosts at an op's create: the same error on every
    # rank of both hosts, the context usable (tests/python/test_shm_full.py).
    add_test(NAME python.shm_full.hosts2.np2
             COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/spawn.py -np 2
                     --hosts 2 ${CMAKE_CURRENT_SOURCE_DIR}/python/test_shm_full.py)
    set_tests_properties(python.shm_full.hosts2.np2 PROPERTIES TIMEOUT 120 LABELS fault
                         PROCESSORS 2 ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
  endif()
  add_test(NAME python.store_faults
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_store_faults.py)
  set_tests_properties(python.store_faults PROPERTIES TIMEOUT 300 LABELS fault
                       ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
  # Two jobs on one store: never one context of both jobs' ranks; store waits bounded
  # (tests/python/test_store_identity.py).
  add_test(NAME python.store_identity
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_store_identity.py)
  set_tests_properties(python.store_identity PROPERTIES TIMEOUT 300 LABELS fault
                       ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
  # ranks_per_host on a store context: groups as simulated hosts, agreement
  # (tests/python/test_store_grouping.py).
  add_test(NAME python.store_grouping
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_store_grouping.py)
  set_tests_properties(python.store_grouping PROPERTIES TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
  add_test(NAME python.llama_tp.help
           COMMAND ${FLUXCPP_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/python/examples/llama_tp.py --help)
  set_tests_properties(python.llama_tp.help PROPERTIES TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "--backend {fluxcpp,torch,single}")
  foreach(ex sp_mlp moe_ep)
    add_test(NAME python.examples.${ex}.help
             COMMAND ${FLUXCPP_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/python/examples/${ex}.py --help)
    set_tests_properties(python.examples.${ex}.help PROPERTIES TIMEOUT 60 ENVIRONMENT "${_py_env}"
                         PASS_REGULAR_EXPRESSION "--tokens TOKENS")
  endforeach()
  # The Python signatures documented in docs/python.md, docs/api.md and README.md against
  # inspect.signature of the package in the source tree (tests/python/test_doc_signatures.py):
  # one process, no MPI (importing fluxcpp loads the library and torch, but initialises no MPI).
  add_test(NAME python.doc_signatures
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_doc_signatures.py)
  set(_py_doc_env "PYTHONPATH=${PROJECT_SOURCE_DIR}/python" "PYTHONDONTWRITEBYTECODE=1"
                  "FLUXCPP_LIBRARY=$<TARGET_FILE:fluxcpp_shared>")
  set_tests_properties(python.doc_signatures PROPERTIES TIMEOUT 60 ENVIRONMENT "${_py_doc_env}")
  # fluxcpp.baseline: the machine line, and a slow torch.mm flagged (one process, no MPI).
  add_test(NAME python.baseline
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_baseline.py)
  set_tests_properties(python.baseline PROPERTIES TIMEOUT 120 ENVIRONMENT "${_py_env}"
                       FIXTURES_REQUIRED fluxcpp_shm_clean)
  # torchrun-style launch (WORLD_SIZE=2, one MPI rank): Context() fails saying how to launch.
  add_test(NAME python.launch_guard
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 ${FLUXCPP_MPIEXEC_FLAGS}
                   ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_launch_guard.py)
  set_tests_properties(python.launch_guard PROPERTIES TIMEOUT 120 ENVIRONMENT "${_py_env}"
                       FIXTURES_REQUIRED fluxcpp_shm_clean)
  # The README's mpirun snippet ("Under mpirun"), extracted from README.md and run on 2 ranks.
  add_test(NAME python.readme.np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${FLUXCPP_MPIEXEC_FLAGS}
                   ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/readme_snippet.py
                   ${PROJECT_SOURCE_DIR}/README.md)
  set_tests_properties(python.readme.np2 PROPERTIES TIMEOUT 300 ENVIRONMENT "${_py_env}"
                       FIXTURES_REQUIRED fluxcpp_shm_clean)
  # The README's block for ranks started without MPI, run as its own script (no mpirun).
  add_test(NAME python.readme_store
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/readme_snippet.py
                   ${PROJECT_SOURCE_DIR}/README.md
                   "Your own processes: multiprocessing or a serving stack")
  set_tests_properties(python.readme_store PROPERTIES TIMEOUT 300 ENVIRONMENT "${_py_env}"
                       FIXTURES_REQUIRED fluxcpp_shm_clean)
  # Context.from_store() without a store: the launcher's environment, then the default group.
  add_test(NAME python.launcher_store
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_launcher_store.py)
  set_tests_properties(python.launcher_store PROPERTIES TIMEOUT 180 PROCESSORS 2
                       ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
  # The README's torchrun recipe (my_layer.py vs torch + gloo), under real torchrun as written.
  add_test(NAME python.readme_torchrun
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/readme_torchrun.py
                   ${PROJECT_SOURCE_DIR}/README.md "Your layer under torchrun, against torch + gloo")
  set_tests_properties(python.readme_torchrun PROPERTIES TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${_py_env}" FIXTURES_REQUIRED fluxcpp_shm_clean)
  # scripts/bench_torch.py --layer (the README's benchmark line, run as written by
  # readme.mpirun_full, label full) on a small layer, --quick: its path in the default suite.
  add_test(NAME python.bench_torch.np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${FLUXCPP_MPIEXEC_FLAGS}
                   ${FLUXCPP_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/bench_torch.py --quick
                   --layer 256,704,16)
  set_tests_properties(python.bench_torch.np2 PROPERTIES TIMEOUT 300 ENVIRONMENT "${_py_env}"
                       FIXTURES_REQUIRED fluxcpp_shm_clean PROCESSORS 2)
  # cmake --install puts the package where docs/python.md says, and it imports from there.
  add_test(NAME python.install
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
                   -DPREFIX=${CMAKE_CURRENT_BINARY_DIR}/python_install_prefix
                   -DPYDIR=${FLUXCPP_PYTHON_INSTALL_DIR} -DPYTHON=${FLUXCPP_TEST_PYTHON}
                   -DTORCH_BACKEND=${FLUXCPP_HAVE_TORCH_BACKEND}
                   -DMPIEXEC=${MPIEXEC_EXECUTABLE} "-DFLAGS=${FLUXCPP_MPIEXEC_FLAGS}"
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/python/install_test.cmake)
  set_tests_properties(python.install PROPERTIES TIMEOUT 300 FIXTURES_REQUIRED fluxcpp_shm_clean)
  # pip install . (pyproject.toml) into a fresh virtual environment, then the installed package
  # alone: import, __version__, the backend and an op on 2 ranks (test_pip_install.py).
  # Label full: it compiles the library again (~100 s here with a cold ccache, ~10 s warm).
  add_test(NAME python.pip_install
           COMMAND ${FLUXCPP_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_pip_install.py)
  set_tests_properties(python.pip_install PROPERTIES TIMEOUT 1500 LABELS full PROCESSORS 2
                       FIXTURES_REQUIRED fluxcpp_shm_clean)
  include(${CMAKE_CURRENT_SOURCE_DIR}/torch_backend/tests.cmake)
endif()
