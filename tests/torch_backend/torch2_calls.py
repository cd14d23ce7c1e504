"""What torch 2.x code paths call on the "fluxcpp" backend, against exact references (run by
test_backend.py on its ranks): the functional collectives DTensor uses
(torch.distributed._functional_collectives), the coalesced calls on lists of whole tensors (the
functional ones and _coalescing_manager's fast path), the group's sequence number, and
shutdown: destroy_process_group tears the backend down and a later call on it says so;
init_process_group("cpu:fluxcpp") selects the same backend."""
import os
import warnings

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

RANK, W = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def own(r, n, scale=1.0):
    """Rank r's input: exact small floats."""
    return (torch.arange(n, dtype=torch.float32) + 100 * r) * scale


def gathered(n, scale=1.0):
    return torch.cat([own(r, n, scale) for r in range(W)])


def summed(n, scale=1.0):
    # Sums of small integers: exact in any order.
    return sum(own(r, n, scale) for r in range(W))


def check_functional():
    g = dist.group.WORLD
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the older names, still what DTensor uses
        assert torch.equal(fc.all_gather_tensor(own(RANK, 4), 0, g), gathered(4))
        full = summed(2 * W)
        rs = fc.reduce_scatter_tensor(own(RANK, 2 * W), "sum", 0, g)
        assert torch.equal(rs, full[2 * RANK:2 * RANK + 2]), (rs, full)
        assert torch.equal(fc.all_reduce(own(RANK, 5), "sum", g), summed(5))
        outs = fc.all_gather_into_tensor_coalesced([own(RANK, 3), own(RANK, 2, 2.0)], g)
        assert torch.equal(outs[0], gathered(3)) and torch.equal(outs[1], gathered(2, 2.0))
        outs = fc.reduce_scatter_tensor_coalesced([own(RANK, W), own(RANK, 3 * W, 0.5)], "sum",
                                                  [0, 0], g)
        assert torch.equal(outs[0], summed(W)[RANK:RANK + 1])
        assert torch.equal(outs[1], summed(3 * W, 0.5)[3 * RANK:3 * RANK + 3])


def check_coalescing_manager():
    a, b = torch.empty(4 * W), torch.empty(2 * W)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(a, own(RANK, 4))
        dist.all_gather_into_tensor(b, own(RANK, 2, 3.0))
    cm.wait()
    assert torch.equal(a, gathered(4)) and torch.equal(b, gathered(2, 3.0))
    c, d = torch.empty(2), torch.empty(1)
    with dist._coalescing_manager():
        dist.reduce_scatter_tensor(c, own(RANK, 2 * W))
        dist.reduce_scatter_tensor(d, own(RANK, W, 2.0))
    assert torch.equal(c, summed(2 * W)[2 * RANK:2 * RANK + 2])
    assert torch.equal(d, summed(W, 2.0)[RANK:RANK + 1])


def check_sequence_number():
    seq = dist.group.WORLD._get_backend(torch.device("cpu"))._get_sequence_number_for_group()
    assert seq > 0
    every = [None] * W
    dist.all_gather_object(every, seq)
    assert all(s == every[0] for s in every), every


def check_torch2_calls():
    for check in (check_functional, check_coalescing_manager, check_sequence_number):
        check()
        print(f"rank {RANK}: {check.__name__} ok", flush=True)


def check_shutdown_and_cpu_prefix(store_path):
    """After destroy_process_group: the backend object refuses calls, naming why; then a group
    made as init_process_group("cpu:fluxcpp") works."""
    old = dist.group.WORLD._get_backend(torch.device("cpu"))
    dist.destroy_process_group()
    try:
        old.allreduce([torch.ones(1)]).wait()
    except RuntimeError as e:
        assert "shut down" in str(e), e
    else:
        raise AssertionError("a call on a destroyed group's backend did not fail")
    dist.init_process_group("cpu:fluxcpp", init_method="file://" + store_path, rank=RANK,
                            world_size=W)
    x = torch.ones(3)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((3,), float(W)))
    dist.destroy_process_group()
    print(f"rank {RANK}: check_shutdown_and_cpu_prefix ok", flush=True)
