"""A stranger on the TCP channel: a process that is not part of the job (another user where the
test runs as root) watches /proc/net/tcp during a create and connects to every new listening
port, then sends every byte it receives back (reflect), sends one gloo header (junk) or says
nothing (silent). Two simulated hosts of one rank, Context.from_store over a FileStore the
stranger cannot read, then an AllReduce. Each rank holds its TCP connect 3 s
(FLUXCPP_TEST_FAULT=tcp_connect:<rank>:delay), so the stranger is the first to connect.

Every rank must raise fluxcpp.Error (the rank the stranger reached naming the connection that
did not prove it is the peer), never compute with the stranger, abort or hang; the stranger must
get nothing but the handshake's first message. Without a stranger (none), the same run computes
the right sum. Run as one process (no mpirun): it re-runs itself under `unshare -n` (root: a
network namespace of its own, whose loopback only this test uses)."""
import multiprocessing as mp
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

from procs import in_network_namespace, join_all, segments_of

STARTED = time.time()  # segments older than this are not this test's (procs.segments_of)

TIMEOUT = 6.0
COUNT = 1 << 14
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr, flush=True)


def rank_main(rank, store_path, results):
    os.environ.update(FLUXCPP_HOST_ID=f"simulated-host-{rank}", FLUXCPP_SOCKET_IFNAME="lo",
                      FLUXCPP_TEST_FAULT=f"tcp_connect:{rank}:delay")
    import torch
    import torch.distributed as dist
    import fluxcpp
    results.put((rank, "pid", os.getpid(), "", 0.0))
    t0 = time.monotonic()
    try:
        store = dist.FileStore(store_path, 2)
        ctx = fluxcpp.Context.from_store(store, rank, 2, timeout_s=TIMEOUT)
        with fluxcpp.AllReduce(ctx, COUNT, torch.float32) as op:
            got = op.forward(torch.full((COUNT,), float(rank + 1)))
        results.put((rank, "ok", got.min().item(), got.max().item(), time.monotonic() - t0))
        ctx.close()
    except fluxcpp.Error as e:
        results.put((rank, e.status.name, str(e), "", time.monotonic() - t0))


def listening_ports():
    ports = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 3 and f[3] == "0A":  # LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def serve(conn, mode, received):
    """One connection of the stranger."""
    try:
        if mode == "junk":
            # A gloo preamble (nbytes, opcode 1: a send, slot, offset, length, roffset): the
            # header that made gloo's I/O thread throw out of the process.
            conn.sendall(struct.pack("<6Q", 48, 1, 12345, 0, 4, 0) + b"\0" * 4)
        conn.settimeout(0.2)
        end = time.monotonic() + TIMEOUT + 6
        while time.monotonic() < end:
            try:
                data = conn.recv(65536)
            except socket.timeout:
                continue
            if not data:
                break
            received[0] += len(data)
            if mode == "reflect":
                conn.sendall(data)
    except OSError:
        pass
    finally:
        conn.close()


def stranger_main(mode, ready, stop, out):
    if os.getuid() == 0:  # another local user: nobody, who cannot read the job's store
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    seen, conns, received, threads = listening_ports(), 0, [0], []
    ready.set()
    while not stop.is_set():
        for port in listening_ports() - seen:
            seen.add(port)
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                continue
            conns += 1
            t = threading.Thread(target=serve, args=(c, mode, received), daemon=True)
            t.start()
            threads.append(t)
        time.sleep(0.001)
    for t in threads:
        t.join(2)
    out.put((conns, received[0]))


def run(mode):
    tmp = tempfile.mkdtemp(prefix="fluxcpp_stranger_")
    os.chmod(tmp, 0o700)  # the job's store: the stranger cannot read it
    ctx = mp.get_context("spawn")
    results, out, ready, stop = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    stranger = None
    if mode != "none":
        stranger = ctx.Process(target=stranger_main, args=(mode, ready, stop, out))
        stranger.start()
        ready.wait(30)
    ranks = [ctx.Process(target=rank_main, args=(r, os.path.join(tmp, "store"), results))
             for r in range(2)]
    for p in ranks:
        p.start()
    hung = join_all(ranks, timeout_s=60)
    check(not hung, f"{mode}: rank(s) {hung} still running after 60 s (watchdog)")
    check(all(p.exitcode == 0 for p in ranks),
          f"{mode}: rank exit codes {[p.exitcode for p in ranks]} (an abort is not an error)")
    got, pids = {}, []
    while not results.empty():
        m = results.get()
        if m[1] == "pid":
            pids.append(m[2])
        else:
            got[m[0]] = m[1:]
    # Segment names start "fluxcpp-<creator pid>-": the ranks' (the rendezvous' included).
    left = segments_of(pids, STARTED)
    check(not left, f"{mode}: left in /dev/shm: {left}")
    conns = received = 0
    if stranger is not None:
        stop.set()
        stranger.join(30)
        if not out.empty():
            conns, received = out.get()
        if stranger.is_alive():
            stranger.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    return got, conns, received


def main():
    got, _, _ = run("none")
    want = 3.0  # 1 + 2
    for r in (0, 1):
        status, lo, hi, secs = got.get(r, ("missing", 0, 0, 0))
        check(status == "ok" and lo == want and hi == want,
              f"none: rank {r}: {status} {lo} {hi} (want the sum {want} on every element)")
    print(f"none: {got}", flush=True)
    for mode in ("reflect", "junk", "silent"):
        got, conns, received = run(mode)
        print(f"{mode}: the stranger made {conns} connection(s) and received {received} bytes; "
              f"ranks: {got}", flush=True)
        check(conns >= 1, f"{mode}: the stranger never connected (the test proves nothing)")
        # What a rank sends before the peer proved itself: its 56-byte hello, per connection.
        check(received <= 56 * conns,
              f"{mode}: the stranger received {received} bytes on {conns} connection(s)")
        for r in (0, 1):
            status, text, _, secs = got.get(r, ("missing", "", "", 0))
            check(status not in ("ok", "missing"),
                  f"{mode}: rank {r} got {status} {text} (an error was expected)")
            check(secs < TIMEOUT + 10, f"{mode}: rank {r} took {secs:.1f} s")
        texts = " ".join(str(v[1]) for v in got.values())
        check("did not prove it is rank" in texts,
              f"{mode}: no rank named the connection that did not prove itself: {texts}")
        why = {"reflect": "own message back", "junk": "not fluxcpp's TCP handshake",
               "silent": "sent nothing"}[mode]
        check(why in texts, f"{mode}: the error does not say '{why}': {texts}")
    print(f"python.tcp_stranger: {'ok' if not failures else f'{len(failures)} failure(s)'}",
          flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    in_network_namespace("FLUXCPP_STRANGER_NETNS")
    main()
