# python.install: cmake --install into a fresh prefix, then import fluxcpp from
# <prefix>/<FLUXCPP_PYTHON_INSTALL_DIR> alone (no build tree on PYTHONPATH, no FLUXCPP_LIBRARY)
# and run an all_gather on 2 ranks; with TORCH_BACKEND=ON, also an all_reduce on the installed
# torch.distributed backend "fluxcpp".
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
set(script "import torch, fluxcpp, os
from mpi4py import MPI
assert fluxcpp.LIBRARY_PATH.startswith('${PREFIX}'), fluxcpp.LIBRARY_PATH
with fluxcpp.Context() as ctx, fluxcpp.AllGather(ctx, 4, 3, torch.float32) as ag:
    y = ag(torch.full((2, 3), float(ctx.rank)))
    assert y.tolist() == [[float(r)] * 3 for r in range(ctx.world_size) for _ in range(2)], y
    print('installed fluxcpp ok at', os.path.dirname(fluxcpp.__file__))
if '${TORCH_BACKEND}' == 'ON':
    import torch.distributed as dist
    assert fluxcpp.distributed.available(), 'the installed package lacks _c10d.so'
    dist.init_process_group('fluxcpp', init_method='file://${PREFIX}/pg', rank=ctx.rank,
                            world_size=ctx.world_size)
    x = torch.ones(3)
    dist.all_reduce(x)
    assert x.tolist() == [float(ctx.world_size)] * 3, x
    dist.destroy_process_group()
")
file(WRITE ${PREFIX}/check.py "${script}")
separate_arguments(FLAGS)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=FLUXCPP_LIBRARY
                        PYTHONPATH=${PREFIX}/${PYDIR} PYTHONDONTWRITEBYTECODE=1
                        ${MPIEXEC} -n 2 ${FLAGS} ${PYTHON} ${PREFIX}/check.py
                RESULT_VARIABLE rc)
file(REMOVE_RECURSE ${PREFIX})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed module failed (${rc})")
endif()
