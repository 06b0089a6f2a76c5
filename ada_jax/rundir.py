"""The run directory: checked before any work, and held by one run at a time.

`check` runs before SFT and before any compile: the workdir must be a directory (or creatable
in a writable parent), writable, of a name the filesystem takes, and what a run keeps there
(checkpoints/, tb/, plots/, base/, metrics.jsonl, config.json, run.lock) of the right kind and
writable; each error names the path and the fix. Before,
a read-only workdir surfaced as a raw PermissionError after SFT and a dozen compiles.

`hold` is the one file lock of the package: an exclusive `flock` on a file that records its
holder (pid, host, start time). The kernel drops the lock when its process ends, however it
ends (SIGKILL, os._exit, a crash); a record left behind that way is taken over with a
warning naming the dead holder. A live holder makes `hold` refuse at once (`Busy`, naming it),
or, with `wait`, wait its turn (the SFT cache, sft.py). On a filesystem without flock (Lustre
mounted without `-o flock`, some NFS mounts) the lock is the file itself: a taker writes its
record to a file of its own and hard-links it into place, which succeeds for exactly one
taker (a link never replaces a file); the record decides whether the holder lives (a holder on
this host whose pid is alive, or one on another host, is live), a stale one is removed by the
one taker that claims it, and `wait` polls. `lock(workdir)` is the run's lock: each process of a job holds
its own file (`run.lock` on process 0, `run.lock.<i>` on process i), so every process of a
second job on a live workdir stops at once, and a job on another process count still meets
process 0's file.
"""
import contextlib
import errno
import fcntl
import hashlib
import itertools
import json
import logging
import os
import random
import socket
import time

log = logging.getLogger(__name__)

DIRS = ("checkpoints", "tb", "plots", "base")  # what a run keeps in its workdir
FILES = ("metrics.jsonl", "config.json", "run.lock")
ROOM = 256  # characters a run adds under its workdir (checkpoints/<step>.orbax-checkpoint-tmp…)


class Busy(RuntimeError):
    """A live run holds the lock."""


def check_named(workdir: str) -> None:
    """Refuse an empty workdir name (it would mean the current directory)."""
    if not workdir.strip():
        raise ValueError(f"--workdir={workdir!r} is empty: name the run's directory, e.g. "
                         f"--workdir=/tmp/run")


def check(workdir: str) -> None:
    """Refuse a workdir that cannot hold a run (module doc), before any work."""
    check_named(workdir)
    path = os.path.abspath(workdir)
    fix = "pass another --workdir"
    _check_length(path)
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


def _check_length(path: str) -> None:
    """A workdir whose name (or a folder's in it) is longer than its filesystem allows: named
    now, not as ENAMETOOLONG from the first file made in it."""
    existing = path
    while not os.path.isdir(existing) and existing != os.path.dirname(existing):
        existing = os.path.dirname(existing)
    name_max = os.pathconf(existing, "PC_NAME_MAX")
    path_max = os.pathconf(existing, "PC_PATH_MAX")
    for part in path.split(os.sep):
        if len(part.encode()) > name_max:
            raise OSError(errno.ENAMETOOLONG, f"workdir {path[:60]}…: the name {part[:40]}… is "
                          f"{len(part.encode())} bytes, more than the {name_max} the filesystem "
                          f"allows: pass a shorter --workdir")
    if len(path.encode()) + ROOM > path_max:
        raise OSError(errno.ENAMETOOLONG, f"workdir {path[:60]}… is {len(path.encode())} bytes "
                      f"long; with the {ROOM} a run adds under it that passes the {path_max} "
                      f"the filesystem allows: pass a shorter --workdir")


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
    import jax  # here, not at the top: the lock itself needs only the standard library
    i = jax.process_index()
    return hold(os.path.join(workdir, "run.lock" + (f".{i}" if i else "")),
                what=f"workdir {os.path.abspath(workdir)}")


def _describe(holder: dict) -> str:
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}")


def _record(f) -> dict:
    f.seek(0)
    try:
        rec = json.loads(f.read() or "{}")
    except ValueError:
        return {}
    return rec if isinstance(rec, dict) else {}


_HELD = set()  # tokens of the holds of this process now (a record of our pid is live if here)


def _alive(holder: dict) -> bool:
    """Could the recorded holder still run? (another host's: yes, it cannot be told here)"""
    if not holder:
        return False
    if holder.get("pid") == os.getpid():
        return holder.get("token") in _HELD  # else a dead run's reused pid
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(holder["pid"], 0)
    except (ProcessLookupError, KeyError, TypeError, OverflowError):
        return False
    except PermissionError:
        pass
    return True


def _has_flock(f) -> bool:
    """Does the filesystem of the open file `f` (new, nobody else's) take flock?"""
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # ENOLCK, EOPNOTSUPP...: Lustre without -o flock, some NFS mounts
        return False
    fcntl.flock(f, fcntl.LOCK_UN)
    return True


@contextlib.contextmanager
def hold(path: str, wait: bool = False, what: str = ""):
    """Hold the lock file `path` (module doc): Busy at once if a live run holds it, or with
    `wait` wait for it. The file is removed on release."""
    what = what or path
    token = f"{socket.gethostname()}.{os.getpid()}.{os.urandom(6).hex()}"
    record = {"pid": os.getpid(), "host": socket.gethostname(), "token": token,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    mine = f"{path}.{token}.tmp"  # the record, complete, before it can be seen as the lock
    _HELD.add(token)  # live from the moment it can be seen (threads of this process)
    try:
        with open(mine, "w") as f:
            f.write(json.dumps(record))
            f.flush()
            flock = _has_flock(f)
        try:
            if flock:
                os.unlink(mine)
                f = _take_flock(path, wait, what, record)
            else:
                f = _take_link(path, wait, what, mine)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(mine)  # linked into place (or not): `path` keeps the record
    except BaseException:
        _HELD.discard(token)
        raise
    try:
        yield
    finally:
        _HELD.discard(token)
        with contextlib.suppress(FileNotFoundError):
            # Before the unlock: a flock waiter on this file then retries. Without flock the
            # file is ours while our record is live, so nobody else removes or replaces it.
            if os.path.samestat(os.fstat(f.fileno()), os.stat(path)):
                os.unlink(path)
        f.close()


def _take_flock(path: str, wait: bool, what: str, record: dict):
    """The open lock file, flock'ed, with our record in it."""
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
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(f.fileno()), os.stat(path)):
                break
        f.close()  # the holder removed the file while we waited: lock the new one
    old = _record(f)
    if old:
        log.warning("%s: taking over the stale lock of %s (%s)", what, _describe(old),
                    "not holding it" if _alive(old) else "no longer running")
    f.truncate(0)
    f.write(json.dumps(record))
    f.flush()
    return f


def _take_link(path: str, wait: bool, what: str, mine: str):
    """Without flock: link our complete record `mine` into place as `path`, which succeeds for
    one taker only (link never replaces a file, on NFS too). A record whose holder is gone is
    removed first by the one taker that claims it (_break). Returns `path` opened."""
    delay, told = 0.005, False
    while True:
        try:
            os.link(mine, path)
            return open(path)
        except FileExistsError:
            pass
        try:
            with open(path, "rb") as f:
                seen = (os.fstat(f.fileno()).st_ino, f.read())
        except FileNotFoundError:
            continue  # released meanwhile: try again
        try:
            holder = json.loads(seen[1] or b"{}")
        except ValueError:
            holder = {}
        holder = holder if isinstance(holder, dict) else {}
        if not _alive(holder):
            _break(path, seen, holder, mine, what)
            continue
        if not wait:
            raise Busy(f"{what} is in use by another run ({_describe(holder)}; no file locks "
                       f"on this filesystem: if that run is gone, remove {path})")
        if not told:
            log.info("%s is in use by %s: waiting for it", what, _describe(holder))
            told = True
        time.sleep(delay * (0.5 + random.random()))
        delay = min(2 * delay, 0.5)


def _break(path: str, seen: tuple, holder: dict, mine: str, what: str) -> None:
    """Remove the stale lock file `path` if it still is `seen` (inode, content), as the one
    taker that claims it: claims are files `<path>.break-<id>.<i>` linked exclusively, the
    first whose earlier ones were all taken by processes now dead (a breaker killed midway).
    Only a claim's holder removes `seen`, and it gives the claim back only after, so a later
    claimant finds `path` changed and leaves it alone."""
    ident = f"{seen[0]}-{hashlib.sha256(seen[1]).hexdigest()[:12]}"
    for i in itertools.count():
        claim = f"{path}.break-{ident}.{i}"
        try:
            os.link(mine, claim)
            break
        except FileExistsError:
            try:
                with open(claim) as f:
                    claimant = _record(f)
            except FileNotFoundError:
                return  # given back: `path` has changed, look again
            if _alive(claimant):
                return  # another taker is removing it: look again
    try:
        with open(path, "rb") as f:
            if (os.fstat(f.fileno()).st_ino, f.read()) != seen:
                return
        log.warning("%s: taking over the stale lock of %s (no longer running)", what,
                    _describe(holder))
        os.unlink(path)
    except FileNotFoundError:
        pass
    finally:
        os.unlink(claim)
