"""Started the way torchrun starts processes (WORLD_SIZE says 2) while MPI's world is 1:
fluxcpp.Context() fails with INVALID_USAGE saying how to launch, instead of giving each process
a world of its own; MPI_COMM_SELF and Context.local() are this process alone on purpose and
work. Run as a single MPI process."""
import os

import fluxcpp
from support import W, check, finish, raises

check(W == 1, f"run on one rank (W={W})")
os.environ["WORLD_SIZE"] = "2"
raises(fluxcpp.Error, fluxcpp.Context, "Context with WORLD_SIZE=2 and one MPI rank",
       status=fluxcpp.Status.INVALID_USAGE, contains=("mpirun -np 2",))
from mpi4py import MPI  # noqa: E402
with fluxcpp.Context(MPI.COMM_SELF) as ctx:  # this process alone, asked for explicitly
    check(ctx.world_size == 1, "Context(MPI.COMM_SELF) with WORLD_SIZE=2")
with fluxcpp.Context.local() as ctx:  # the same without MPI
    check(ctx.world_size == 1, "Context.local() with WORLD_SIZE=2")
raises(fluxcpp.Error, lambda: fluxcpp.Context(MPI.COMM_WORLD.Dup()),
       "Context over a copy of MPI_COMM_WORLD with WORLD_SIZE=2",
       status=fluxcpp.Status.INVALID_USAGE, contains=("mpirun -np 2",))
os.environ["WORLD_SIZE"] = "1"
with fluxcpp.Context() as ctx:
    check(ctx.world_size == 1, "a one-process job still works")
finish("python.launch_guard")
