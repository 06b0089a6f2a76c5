"""The run directory: checked before any work, and held by one run at a time.

`check` runs before SFT and before any compile: the workdir must be a directory (or creatable
in a writable parent), writable, and what a run keeps there (checkpoints/, tb/, plots/, base/,
metrics.jsonl, config.json) of the right kind; each error names the path and the fix. Before,
a read-only workdir surfaced as a raw PermissionError after SFT and a dozen compiles.

`hold` is the one file lock of the package: an exclusive `flock` on a file that records its
holder (pid, host, start time). The kernel drops the lock when its process ends, however it
ends (SIGKILL, os._exit, a crash); a record left behind that way is taken over with a
warning naming the dead holder. A live holder makes `hold` refuse at once (`Busy`, naming it),
or, with `wait`, wait its turn (the SFT cache, sft.py). On a filesystem without flock (Lustre
mounted without `-o flock`) the record decides: a holder on this host whose pid is alive, or
one on another host, is live. `lock(workdir)` is the run's lock: each process of a job holds
its own file (`run.lock` on process 0, `run.lock.<i>` on process i), so every process of a
second job on a live workdir stops at once, and a job on another process count still meets
process 0's file.
"""
import contextlib
import fcntl
import json
import logging
import os
import socket
import time

import jax

log = logging.getLogger(__name__)

DIRS = ("checkpoints", "tb", "plots", "base")  # what a run keeps in its workdir
FILES = ("metrics.jsonl", "config.json")


class Busy(RuntimeError):
    """A live run holds the lock."""


def check(workdir: str) -> None:
    """Refuse a workdir that cannot hold a run (module doc), before any work."""
    path = os.path.abspath(workdir)
    fix = "pass another --workdir"
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"workdir {path} is a file, not a directory: {fix} (or move "
                                 f"the file away)")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise NotADirectoryError(f"workdir {path}: {existing} is a file, not a directory: {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "workdir" if existing == path else f"workdir {path} cannot be created:"
        raise PermissionError(f"{what} {existing} is not writable (permissions or a read-only "
                              f"filesystem): make it writable or {fix}")
    for names, isdir in ((DIRS, True), (FILES, False)):
        for name in names:
            p = os.path.join(path, name)
            if os.path.exists(p) and os.path.isdir(p) != isdir:
                kind = "a directory" if isdir else "a file"
                raise FileExistsError(f"workdir {path}: {p} must be {kind}: move it away or "
                                      f"{fix}")
            if os.path.exists(p) and not os.access(p, os.W_OK | (os.X_OK if isdir else 0)):
                raise PermissionError(f"workdir {path}: {p} is not writable: make it writable "
                                      f"or {fix}")


def make(path: str) -> list:
    """os.makedirs(path, exist_ok=True); returns the directories it created, outermost first."""
    new, p = [], os.path.abspath(path)
    while not os.path.exists(p):
        new.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    return new[::-1]


def remove_empty(dirs: list) -> None:
    """Remove those of `dirs` (make's list) that are empty, innermost first."""
    for d in reversed(dirs):
        if os.path.isdir(d) and not os.listdir(d):
            os.rmdir(d)


def lock(workdir: str):
    """This process's lock on `workdir` for the run's life (module doc)."""
    i = jax.process_index()
    return hold(os.path.join(workdir, "run.lock" + (f".{i}" if i else "")),
                what=f"workdir {os.path.abspath(workdir)}")


def _describe(holder: dict) -> str:
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}")


def _record(f) -> dict:
    f.seek(0)
    try:
        return json.loads(f.read() or "{}")
    except ValueError:
        return {}


def _alive(holder: dict) -> bool:
    """Could the recorded holder still run? (another host's: yes, it cannot be told here)"""
    if not holder or holder.get("pid") == os.getpid():
        return False
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@contextlib.contextmanager
def hold(path: str, wait: bool = False, what: str = ""):
    """Hold the lock file `path` (module doc): Busy at once if a live run holds it, or with
    `wait` wait for it. The file is removed on release."""
    what = what or path
    while True:
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _record(f)
            if not wait:
                f.close()
                raise Busy(f"{what} is in use by another run ({_describe(holder)}; lock file "
                           f"{path}): wait for it to end, stop it, or use another directory")
            log.info("%s is in use by %s: waiting for it", what, _describe(holder))
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError:  # no flock on this filesystem: the record decides
            holder = _record(f)
            if _alive(holder):
                f.close()
                raise Busy(f"{what} is in use by another run ({_describe(holder)}; no file "
                           f"locks on this filesystem: if that run is gone, remove {path})"
                           ) from None
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(f.fileno()), os.stat(path)):
                break
        f.close()  # the holder removed the file while we waited: lock the new one
    old = _record(f)
    if old:
        log.warning("%s: taking over the stale lock of %s (%s)", what, _describe(old),
                    "not holding it" if _alive(old) else "no longer running")
    f.truncate(0)
    f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}))
    f.flush()
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # before the unlock: a waiter on this file then retries
        f.close()
