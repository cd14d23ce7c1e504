"""python/examples/sp_mlp.py (sequence-parallel MLP: AgGemm / GemmRs layers with autograd) and
python/examples/moe_ep.py (MoeDispatch -> GroupedGemm -> MoeCombine) at W ranks, each run in this
process with its small default config: its own check against the one-rank reference passes (f32
with a short timing run, bf16, and for the MLP the bitwise integer case), and with --corrupt (one
weight of the fluxcpp path changed on the last rank) the example exits with status 1."""
import os
import sys

from support import RANK, check, finish

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                                "examples"))
import moe_ep  # noqa: E402
import sp_mlp  # noqa: E402

QUICK = ["--warmup", "0", "--repeat", "1"]


def status(main, argv):
    """The exit status of main(argv): 0 when it returns."""
    try:
        main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


for name, main, runs in (
        ("sp_mlp", sp_mlp.main, (QUICK, ["--dtype", "bf16", "--no-bench"],
                                 ["--data", "int", "--act", "relu", "--no-bench"],
                                 ["--no-backward", "--no-packed", "--no-bench"])),
        ("moe_ep", moe_ep.main, (QUICK, ["--dtype", "bf16", "--no-bench"],
                                 ["--topk", "1", "--experts", "12", "--no-bench"]))):
    for argv in runs:
        check(status(main, argv) == 0, f"{name} {' '.join(argv)}: its check failed")
    for argv in (["--corrupt", "--no-bench"], ["--corrupt", "--dtype", "bf16", "--no-bench"]):
        if RANK == 0:
            print(f"{name} {' '.join(argv)}: a MISMATCH is expected", flush=True)
        check(status(main, argv) == 1,
              f"{name} {' '.join(argv)}: a wrong result did not fail the example's check")

finish("python.examples")
