"""The product describes itself, not its making: no development-session or issue numbers and no
task-version labels (a `v` and a digit) in the code, docs, tests, scripts, configs or notebooks. A
reader cannot look up a development stage; a task is named by what it is (the 112-family task)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHERE = ("README.md", "docs", "ada_jax", "configs", "scripts", "tests", "colab", "setup.py")
TEXT = (".py", ".md", ".sh", ".ipynb", ".txt", ".json", ".cfg", ".ini", ".toml", ".yaml", ".yml")
HISTORY = re.compile(r"session [0-9]+|issue #?[0-9]+", re.IGNORECASE)
# a version label standing alone (the v4 task) or in a name (families112_v4); nbformat's own
# module name is not one
VERSION = re.compile(r"(?<![\w.])v[2-9](?![\w.])|_v[2-9](?![0-9])")


def _files():
    for top in WHERE:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            yield path
        for d, dirs, names in os.walk(path):
            dirs[:] = [x for x in dirs if not x.startswith((".", "__pycache__"))]
            for name in names:
                yield os.path.join(d, name)


def _hits(pattern):
    me = os.path.abspath(__file__)
    out = []
    for path in _files():
        rel = os.path.relpath(path, ROOT)
        if re.search(pattern, rel):  # a file or folder named by a version
            out.append(rel)
        if path == me or not path.endswith(TEXT):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                if pattern.search(line):
                    out.append(f"{rel}:{i}: {line.strip()[:120]}")
    return out


def test_no_session_or_issue_numbers():
    assert _hits(HISTORY) == []


def test_no_task_version_labels():
    assert _hits(VERSION) == []


def test_the_patterns_catch_what_they_are_for():
    """The guard can fail: each pattern matches the words it exists to keep out."""
    n = "2"  # the examples are built, so that a plain grep of the tree finds none
    for text in ("in session " + n + "0", "Session " + n + "'s task", "issue " + n + "9",
                 "issue #" + n):
        assert HISTORY.search(text), text
    for text in ("the v" + n + " task", "docs/results/families112_v" + n + "/",
                 "families112_v" + n + "_lr1e-3", "(v" + n + ")"):
        assert VERSION.search(text), text
    for text in ("from nbformat.v4 import", "the session's log", "an issue with", "uv2x",
                 "cu130", "a v2.1 release"):
        assert not HISTORY.search(text) and not VERSION.search(text), text
