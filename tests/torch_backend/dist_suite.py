"""PyTorch's own backend suite (torch/testing/_internal/distributed/distributed_test.py, shipped
in Debian's python3-torch) run the way PyTorch runs a plugin backend: BACKEND=fluxcpp (or gloo,
for the table to compare with), WORLD_SIZE=W, each test starting W ranks.

    BACKEND=fluxcpp WORLD_SIZE=2 PYTHONPATH=build/python python3 tests/torch_backend/dist_suite.py [-k pattern] [-v]

DIST_SUITE_START=spawn: each test's ranks spawned (fresh interpreters), not forked (below).
DIST_SUITE_HOSTS=H: the ranks are H simulated hosts of WORLD_SIZE / H consecutive ranks
(FLUXCPP_HOST_ID), whose groups meet over the library's TCP channel on the loopback.

scripts/torch_suite.sh runs it whole, for both backends, and tabulates; tests/CMakeLists.txt
runs a subset (torch_backend.suite.*)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the expecttest stand-in
# torch's run_tests() writes JUnit XML when CI is set, through xmlrunner, which Debian does not
# package; the outcome is in the exit status and the log either way.
os.environ.pop("CI", None)

import torch  # noqa: E402
import torch.testing._internal.common_distributed as common_distributed  # noqa: E402

BACKEND = os.environ.setdefault("BACKEND", "fluxcpp")
# DIST_SUITE_AS=gloo: the suite's own skips read BACKEND=gloo (its tests that it runs for gloo
# only: timeouts, batch_isend_irecv_gloo, the object collectives, ...), and the ranks then run
# them on fluxcpp. A test whose body asks for gloo by name may then fail for that reason alone.
AS = os.environ.get("DIST_SUITE_AS") or None
if AS:
    os.environ["BACKEND"] = AS
if BACKEND == "fluxcpp":
    import fluxcpp  # noqa: E402,F401  registers the backend, here and in every spawned rank
    # What a plugin backend declares before distributed_test.py reads it (at import).
    for feature in ("plugin", "subgroup", "ddp"):
        common_distributed.DistTestCases.backend_feature[feature].add("fluxcpp")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

torch.backends.cuda.matmul.allow_tf32 = False
if AS:
    import torch.testing._internal.distributed.distributed_test as _dt
    os.environ["BACKEND"] = _dt.BACKEND = BACKEND


HOSTS = int(os.environ.get("DIST_SUITE_HOSTS", "1"))


# How each test starts its ranks. "fork" (the default): from this process, which has imported
# torch, the suite and fluxcpp once, so a test's ranks start in milliseconds (spawned, each rank
# imports them again: ~2 s of CPU per rank and test, 171 s for the CI subset on a loaded 2-core
# machine against 13 s). A forked rank still makes its own process group, context and
# connections; "spawn" starts them as PyTorch's test_distributed_spawn.py does.
START = os.environ.get("DIST_SUITE_START", "fork")
if START not in ("fork", "spawn"):
    sys.exit(f"dist_suite.py: DIST_SUITE_START={START!r} must be fork or spawn")


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if START == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)

    @classmethod
    def _run(cls, rank, *args, **kwargs):
        # In the spawned rank, before any group exists: its simulated host.
        if HOSTS > 1:
            per_host = max(1, int(os.environ["WORLD_SIZE"]) // HOSTS)
            os.environ["FLUXCPP_HOST_ID"] = f"simulated-host-{rank // per_host}"
            os.environ.setdefault("FLUXCPP_SOCKET_IFNAME", "lo")
        super()._run(rank, *args, **kwargs)


if __name__ == "__main__":
    # torch's MultiProcessTestCase makes each test's store file with NamedTemporaryFile(delete=
    # False) and removes it on one path of its tearDown only: the files go into a folder of this
    # run, removed at exit, instead of staying in /tmp; under FLUXCPP_TEST_TMPDIR (the build tree,
    # from ctest) if set, so that a run killed before its exit leaves nothing in /tmp either.
    import atexit
    import shutil
    import tempfile
    base = os.environ.get("FLUXCPP_TEST_TMPDIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    tempfile.tempdir = tempfile.mkdtemp(prefix="fluxcpp_dist_suite_", dir=base)
    atexit.register(shutil.rmtree, tempfile.tempdir, True)
    run_tests()
