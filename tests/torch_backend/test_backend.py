"""The "fluxcpp" torch.distributed backend against exact references, on W ranks started by
tests/python/spawn.py (multiprocessing, a FileStore, no MPI):

    spawn.py -np W tests/torch_backend/test_backend.py

Every collective, every dtype and ReduceOp it defines, against what each rank computes locally
from every rank's (known) input: exact, with float sums in rank order accumulated as documented
(f32 in f32, bf16/f16 in f32 rounded once); results bitwise equal on every rank; async works,
get_future, subgroups, point to point with tags and any source; the errors for bad arguments;
ranks that make different calls (an error on every rank naming both, the group goes on);
Work.wait(timeout) raising at its timeout while a peer is late;
Context.from_group with a fused op; DDP against gloo (bitwise at W = 2, where a sum of two is
order-free; within 1e-6 relative otherwise); torch 2.x's calls (torch2_calls.py). The call
check's cases are in call_check_cases.py, the shared inputs and references in backend_data.py."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from backend_data import (FLOATS, INTS, OPS, RANK, W, data, defined, expect_error, reference,
                          same_everywhere)
from call_check_cases import check_all_to_all_carried, check_from_group, check_mismatched_calls
from torch2_calls import check_shutdown_and_cpu_prefix, check_torch2_calls


def check_all_reduce():
    for dtype in FLOATS + INTS + [torch.bool]:
        for name, op in OPS.items():
            if not defined(name, dtype):
                continue
            for n in (1, 7, 4099):
                x = data(RANK, n, dtype)
                dist.all_reduce(x, op=op)
                exp = reference(name, [data(r, n, dtype) for r in range(W)], dtype)
                assert torch.equal(x, exp), f"all_reduce {name} {dtype} n={n}: {x[:8]} != {exp[:8]}"
    x = data(RANK, 300000, torch.float32)  # the large-message path of AllReduce
    dist.all_reduce(x)
    assert torch.equal(x, reference("SUM", [data(r, 300000, torch.float32) for r in range(W)],
                                    torch.float32))
    same_everywhere(x, "all_reduce f32")
    for dtype in (torch.complex64, torch.complex128):
        z = torch.complex(data(RANK, 5, torch.float64), data(RANK, 5, torch.float64, 1)).to(dtype)
        dist.all_reduce(z)
        exp = sum(torch.complex(data(r, 5, torch.float64), data(r, 5, torch.float64, 1))
                  for r in range(W)).to(dtype)
        assert torch.equal(z, exp), f"all_reduce complex {dtype}"


def check_movement():
    for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.bool, torch.int64):
        # 5000: 20-40 KiB (f32, int64), carried in larger classes; 30000: 30-240 KiB, carried up
        # to 128 KiB across hosts of one rank each, in the call's own exchange elsewhere
        for n in (1, 3, 1000, 5000, 30000):
            x = data(RANK, n, dtype)
            # all_gather (list) and all_gather_into_tensor
            outs = [torch.empty_like(x) for _ in range(W)]
            dist.all_gather(outs, x)
            for r in range(W):
                assert torch.equal(outs[r], data(r, n, dtype)), f"all_gather {dtype} n={n} rank {r}"
            flat = torch.empty(W * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, x)
            assert torch.equal(flat, torch.cat([data(r, n, dtype) for r in range(W)]))
            # broadcast from every root
            for root in range(W):
                b = data(RANK, n, dtype)
                dist.broadcast(b, src=root)
                assert torch.equal(b, data(root, n, dtype)), f"broadcast {dtype} root {root}"
            # gather / scatter to and from the last rank
            root = W - 1
            glist = [torch.empty_like(x) for _ in range(W)] if RANK == root else None
            dist.gather(x, gather_list=glist, dst=root)
            if RANK == root:
                assert all(torch.equal(glist[r], data(r, n, dtype)) for r in range(W))
            s = torch.empty_like(x)
            dist.scatter(s, scatter_list=[data(100 + r, n, dtype) for r in range(W)]
                         if RANK == root else None, src=root)
            assert torch.equal(s, data(100 + RANK, n, dtype)), f"scatter {dtype}"
            # alltoall, equal and uneven splits
            inp = torch.cat([data(10 * RANK + t, n, dtype) for t in range(W)])
            out = torch.empty_like(inp)
            dist.all_to_all_single(out, inp)
            assert torch.equal(out, torch.cat([data(10 * s + RANK, n, dtype) for s in range(W)]))
            send = [(RANK + t) % 3 + 1 for t in range(W)]
            recv = [(s + RANK) % 3 + 1 for s in range(W)]
            inp = torch.cat([data(10 * RANK + t, send[t], dtype) for t in range(W)])
            out = torch.empty(sum(recv), dtype=dtype)
            dist.all_to_all_single(out, inp, recv, send)
            assert torch.equal(out, torch.cat([data(10 * s + RANK, recv[s], dtype)
                                               for s in range(W)])), f"alltoall splits {dtype}"
            outs = [torch.empty(recv[s], dtype=dtype) for s in range(W)]
            dist.all_to_all(outs, [data(10 * RANK + t, send[t], dtype) for t in range(W)])
            assert all(torch.equal(outs[s], data(10 * s + RANK, recv[s], dtype)) for s in range(W))
            # One rank's message outgrows the op the others' still fit: the call that tries the
            # op fails on every rank, they agree on the size, grow, and the result is whole.
            big = 200000 + 17
            send = [big if RANK == 0 and t == 1 else 1 for t in range(W)]
            recv = [big if RANK == 1 and s == 0 else 1 for s in range(W)]
            inp = torch.cat([data(10 * RANK + t, send[t], dtype) for t in range(W)])
            out = torch.empty(sum(recv), dtype=dtype)
            dist.all_to_all_single(out, inp, recv, send)
            assert torch.equal(out, torch.cat([data(10 * s + RANK, recv[s], dtype)
                                               for s in range(W)])), f"alltoall growth {dtype}"


def check_reductions_to_parts():
    for dtype in (torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.float16):
        for name in ("SUM", "MAX"):
            n = 5
            ins = [data(10 * RANK + i, n, dtype) for i in range(W)]
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(out, ins, op=OPS[name])
            exp = reference(name, [data(10 * r + RANK, n, dtype) for r in range(W)], dtype)
            assert torch.equal(out, exp), f"reduce_scatter {name} {dtype}"
            out2 = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(out2, torch.cat(ins), op=OPS[name])
            assert torch.equal(out2, exp), f"reduce_scatter_tensor {name} {dtype}"
            for root in range(W):
                x = data(RANK, n, dtype)
                keep = x.clone()
                dist.reduce(x, dst=root, op=OPS[name])
                if RANK == root:
                    assert torch.equal(x, reference(name, [data(r, n, dtype) for r in range(W)],
                                                    dtype)), f"reduce {name} {dtype}"
                else:
                    assert torch.equal(x, keep), "reduce changed a non-root's tensor"


def check_async_and_groups():
    works = [dist.all_reduce(torch.full((1000,), float(i)), async_op=True) for i in range(8)]
    futs = [w.get_future() for w in works]
    for i, f in enumerate(futs):
        (t,) = f.wait()
        assert torch.equal(t, torch.full((1000,), float(i * W)))
    assert all(w.is_completed() for w in works)
    # A future's callback that issues and waits for another call of the group (PowerSGD's
    # hook does): it must not run on the thread that runs the group's calls.
    y = torch.ones(16)

    def then(fut):
        return dist.all_reduce(y, async_op=True).get_future().wait()

    (z,) = dist.all_reduce(torch.ones(16), async_op=True).get_future().then(then).wait()
    assert torch.equal(z, torch.full((16,), float(W)))
    dist.barrier()
    if W >= 2:
        members = list(range(1, W))
        g = dist.new_group(members)
        if RANK in members:
            for n in (3, 25000):  # 25000: 100 KB, carried when every rank is a host of its own
                y = data(RANK, n, torch.float32)
                dist.all_reduce(y, group=g)
                assert torch.equal(y, reference("SUM", [data(r, n, torch.float32)
                                                        for r in members], torch.float32))
            assert dist.get_world_size(g) == len(members)


def check_p2p():
    if W < 2:
        return
    nxt, prv = (RANK + 1) % W, (RANK - 1) % W
    for n in (0, 1, 3, 1 << 20 | 1):  # an odd byte count and one past a chunk
        x = data(RANK, n, torch.int8)
        sw = dist.isend(x, nxt, tag=n % 7)
        y = torch.empty(n, dtype=torch.int8)
        dist.recv(y, prv, tag=n % 7)
        sw.wait()
        assert torch.equal(y, data(prv, n, torch.int8)), f"send/recv n={n}"
    ops = [dist.P2POp(dist.isend, data(RANK, 64, torch.float32), nxt),
           dist.P2POp(dist.irecv, torch.empty(64), prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(ops[1].tensor, data(prv, 64, torch.float32))
    if RANK == 0:
        got = {}
        for _ in range(W - 1):
            t = torch.empty(4)
            src = dist.recv(t)  # any source
            got[src] = t
        assert sorted(got) == list(range(1, W)) and all(
            torch.equal(got[s], torch.full((4,), float(s))) for s in got)
    else:
        dist.send(torch.full((4,), float(RANK)), 0)
    # a tag the receiver does not expect: an error naming both, never a silent match
    if RANK == 0:
        dist.send(torch.ones(2), 1, tag=5)
    elif RANK == 1:
        try:
            dist.recv(torch.empty(2), 0, tag=6)
            raise AssertionError("a recv with the wrong tag succeeded")
        except RuntimeError as e:
            assert "tag 5" in str(e) and "expects tag 6" in str(e), e
        # the message's chunks still lie ahead: receiving from rank 0 stays broken, saying why
        expect_error(lambda: dist.recv(torch.empty(2), 0, tag=5), "failed earlier", "tag 5")
    dist.barrier()


def check_errors():
    t = torch.ones(4, 4).t()
    expect_error(lambda: dist.all_reduce(t), "allreduce", "contiguous")
    expect_error(lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND), "BAND",
                 "Float")
    expect_error(lambda: dist.all_gather([torch.ones(2)] * W, torch.ones(3)), "allgather",
                 "elements")
    sp = torch.sparse_coo_tensor([[0]], [1.0], (3,))
    expect_error(lambda: dist.all_reduce(sp), "sparse")
    if W > 1:
        # torch refuses it first (ValueError); the backend's own check, called directly
        expect_error(lambda: dist.send(torch.ones(1), RANK), "destination rank")
        be = dist.group.WORLD._get_backend(torch.device("cpu"))
        expect_error(lambda: be.send([torch.ones(1)], RANK, 0).wait(), "itself")
        # sizes that disagree across ranks: an error on every rank naming the call and the
        # ranks' values, and the group goes on
        expect_error(lambda: dist.all_reduce(torch.ones(10 + RANK)), "allreduce", "disagree", "10")
        x = torch.ones(5)
        dist.all_reduce(x)
        assert torch.equal(x, torch.full((5,), float(W)))
    dist.barrier()


def check_async_progress():
    """An async call that no rank waits for completes on the groups' workers, also after a
    stretch of blocking calls (each run by its caller), when the worker looks for calls least
    often (every 4 ms), and after pauses without calls."""
    if W == 1:
        return

    def unwaited(what):
        """An async all_reduce nobody waits for: its milliseconds until it is complete."""
        x = torch.ones(4)
        w = dist.all_reduce(x, async_op=True)
        t0 = time.monotonic()
        while not w.is_completed():
            assert time.monotonic() - t0 < 10, f"an async all_reduce {what} did not progress"
            time.sleep(0.0002)
        assert torch.equal(x, torch.full((4,), float(W)))
        return (time.monotonic() - t0) * 1e3

    for _ in range(25):  # ~50 ms of calls the callers run themselves
        dist.all_reduce(torch.ones(4))
        time.sleep(0.002)
    took = unwaited("after blocking calls")
    print(f"rank {RANK}: an async all_reduce nobody waited for took {took:.1f} ms", flush=True)
    for _ in range(5):  # the worker ran the last one; pauses without calls
        time.sleep(0.003)
        took = unwaited("after a pause")
    print(f"rank {RANK}: the last after a pause took {took:.2f} ms", flush=True)


def check_wait_timeout():
    """Work.wait(timeout) raises at the timeout while a peer is late; the call completes once
    the peer arrives, right."""
    if W == 1:
        return
    x = torch.ones(4)
    if RANK == 0:
        w = dist.all_reduce(x, async_op=True)
        t0 = time.monotonic()
        try:
            w.wait(timeout=datetime.timedelta(seconds=1))
            raise AssertionError("wait(timeout=1 s) returned while the other ranks are 3 s late")
        except RuntimeError:
            took = time.monotonic() - t0
            assert 0.9 < took < 2.0, f"wait(timeout=1 s) raised after {took:.2f} s"
        w.wait()
    else:
        time.sleep(3)
        dist.all_reduce(x)
    assert torch.equal(x, torch.full((4,), float(W)))


def check_ddp():
    gloo = dist.new_group(list(range(W)), backend="gloo")

    def train(group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 8))
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                        bucket_cap_mb=0.01)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(RANK)
        for _ in range(5):
            opt.zero_grad()
            loss = ddp(torch.randn(16, 32, generator=g)).square().mean()
            loss.backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    ours, theirs = train(None), train(gloo)
    for a, b in zip(ours, theirs):
        if W == 2:
            assert torch.equal(a, b), "DDP over fluxcpp differs from gloo at W = 2"
        else:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        same_everywhere(a, "DDP parameters")


def main():
    dist.init_process_group("fluxcpp", init_method="file://" + os.environ["FLUXCPP_TEST_STORE"]
                            + ".pg", rank=RANK, world_size=W)
    assert dist.get_backend() == "fluxcpp" or dist.get_backend() == "FLUXCPP"
    for check in (check_all_reduce, check_movement, check_reductions_to_parts,
                  check_async_and_groups, check_async_progress, check_p2p, check_errors,
                  check_all_to_all_carried,
                  check_mismatched_calls,
                  check_wait_timeout, check_from_group, check_ddp, check_torch2_calls):
        check()
        print(f"rank {RANK}: {check.__name__} ok", flush=True)
    late = dist.all_reduce(torch.ones(4), async_op=True)
    check_shutdown_and_cpu_prefix(os.environ["FLUXCPP_TEST_STORE"] + ".pg2")  # destroys first
    assert late.wait() and late.is_completed()  # a Work outlives its group: the queue finished


if __name__ == "__main__":
    main()
    sys.exit(0)
