"""The takers of tests/test_rundir.py's lock race: with flock made unavailable (as on a
filesystem without file locks), fork N processes that wait on one pipe, release them at once
(closing it), and let each take the lock (rundir.hold) and write `in <pid>` / `out <pid>`
around a short hold to a shared O_APPEND log. Prints how many were refused (Busy).

  python tests/lock_taker.py LOCK LOG N WAIT(0/1) HOLD_S
"""
import errno
import fcntl
import os
import sys
import time


def _no_flock(*args):
    raise OSError(errno.ENOLCK, "No locks available")


fcntl.flock = _no_flock

from ada_jax import rundir  # noqa: E402

BUSY = 3


def take(lock: str, log: str, wait: bool, hold_s: float) -> int:
    try:
        with rundir.hold(lock, wait=wait):
            fd = os.open(log, os.O_WRONLY | os.O_APPEND)
            os.write(fd, f"in {os.getpid()}\n".encode())
            time.sleep(hold_s)
            os.write(fd, f"out {os.getpid()}\n".encode())
            os.close(fd)
    except rundir.Busy:
        return BUSY
    return 0


def main(lock, log, n, wait, hold_s):
    go_r, go_w = os.pipe()
    pids = []
    for _ in range(int(n)):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.read(go_r, 1)  # EOF for every taker at once when the parent closes go_w
            os._exit(take(lock, log, wait == "1", float(hold_s)))
        pids.append(pid)
    os.close(go_r)
    time.sleep(0.5)  # every taker blocked on the pipe
    os.close(go_w)
    codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
    assert set(codes) <= {0, BUSY}, codes
    print(codes.count(BUSY))


if __name__ == "__main__":
    main(*sys.argv[1:])
