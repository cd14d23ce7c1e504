"""What the backend's checks (test_backend.py, call_check_cases.py) share: this rank and the
world, every rank's known input, and the references computed from them."""
import os

import torch
import torch.distributed as dist

RANK, W = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG, "BAND": dist.ReduceOp.BAND,
       "BOR": dist.ReduceOp.BOR, "BXOR": dist.ReduceOp.BXOR}


def data(rank, n, dtype, seed=0):
    """Rank `rank`'s input: small values so that products stay exact in every type."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randint(-8, 9, (n,), generator=g).double() / 4).to(dtype)
    return torch.randint(0, 4, (n,), generator=g).to(dtype)


def reference(name, inputs, dtype):
    """The reduction in rank order, accumulated as the backend documents."""
    acc_t = torch.float64 if dtype == torch.float64 else (
        torch.float32 if dtype.is_floating_point else dtype)
    acc = inputs[0].to(acc_t)
    for x in inputs[1:]:
        x = x.to(acc_t)
        if dtype == torch.bool:
            acc = {"SUM": acc | x, "MAX": acc | x, "BOR": acc | x, "BXOR": acc ^ x}.get(name, acc & x)
        elif name in ("SUM", "AVG"):
            acc = acc + x
        elif name == "PRODUCT":
            acc = acc * x
        elif name == "MIN":
            acc = torch.minimum(acc, x)
        elif name == "MAX":
            acc = torch.maximum(acc, x)
        else:
            acc = {"BAND": acc & x, "BOR": acc | x, "BXOR": acc ^ x}[name]
    if name == "AVG":
        acc = acc / len(inputs)
    return acc.to(dtype)


def defined(name, dtype):
    if name in ("BAND", "BOR", "BXOR"):
        return not dtype.is_floating_point
    if name == "AVG":
        return dtype.is_floating_point
    return True


def same_everywhere(t, what):
    """t's bytes are the same on every rank."""
    b = t.contiguous().view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)
    parts = [torch.empty_like(b) for _ in range(W)]
    dist.all_gather(parts, b)
    for r, p in enumerate(parts):
        assert torch.equal(p, b), f"{what}: rank {r}'s result differs from rank {RANK}'s"


def expect_error(fn, *words):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        assert all(w in str(e) for w in words), f"error {e!r} lacks {words}"
        return
    raise AssertionError(f"no error; expected one with {words}")
