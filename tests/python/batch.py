"""Runs several test scripts one after the other in this interpreter: one launch (mpirun, or
spawn.py) and one `import torch` per rank for all of them instead of one per script. On a 2-core
machine torch's import alone is ~1.8 s of a core per rank and script (docs/testing.md).

    mpirun -np N python3 batch.py test_dense.py test_a2a.py ...
    spawn.py -np N [--hosts H] batch.py test_dense.py test_a2a.py ...

Each script runs as it would alone (runpy, as __main__) and ends in support.finish(), whose exit
status every rank agrees on; its failures are its own (support.failures is emptied before it).
Every script runs, whatever an earlier one found, and the exit status is 1 when any failed; a
line per script names it, its status and its time. An exception that escapes a script ends the
batch there (a rank that left a collective halfway would leave the others waiting): the rank
prints it, naming the script, and exits 1, which makes mpirun (or spawn.py) stop every rank."""
import os
import runpy
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import support  # noqa: E402  (after the path: the scripts' own import of it finds this module)


def main(scripts):
    if not scripts:
        sys.exit("batch.py: no test scripts given")
    support.IN_BATCH = True
    failed = []
    for script in scripts:
        path = script if os.path.isabs(script) else os.path.join(HERE, script)
        name = os.path.basename(path)
        del support.failures[:]
        start = time.monotonic()
        status = 0
        argv = sys.argv
        try:
            sys.argv = [path]
            runpy.run_path(path, run_name="__main__")
            print(f"[rank {support.RANK}] batch.py: {name} ended without support.finish()",
                  file=sys.stderr, flush=True)
            status = 1
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - reported, then the batch ends (see above)
            print(f"[rank {support.RANK}] batch.py: {name} raised:\n{traceback.format_exc()}",
                  file=sys.stderr, flush=True)
            os._exit(1)
        finally:
            sys.argv = argv
        if status != 0:
            failed.append(name)
        if support.RANK == 0:
            print(f"batch.py: {name}: {'ok' if status == 0 else f'status {status}'} "
                  f"({time.monotonic() - start:.1f} s)", flush=True)
    support.end_batch()
    if support.RANK == 0:
        print(f"batch.py: {len(scripts) - len(failed)} of {len(scripts)} scripts passed"
              + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    if "mpi4py.MPI" not in sys.modules:
        # Ranks started without MPI leave at once, their verdict final: at interpreter exit
        # torch 2.15 processes here aborted now and then ("terminate called without an active
        # exception", SIGABRT, after every script had passed: 1 rank in 3 fresh-clone runs; not
        # yet traced). Under mpirun, MPI_Finalize must run, so those exit normally.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1 if failed else 0)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
