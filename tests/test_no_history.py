"""The product describes itself, not its making: no development-session or issue numbers, no
task-version labels (a `v` and a digit) and no notes on the work that made it (the session it was
done in, an issue's targets or numbered items, a machine lent to it) in the code, docs, tests,
scripts, configs or notebooks. A reader cannot look up a development stage or a work item; a task
is named by what it is (the 112-family task), a target by what it asks (≤ 0.8× TRL's CPU time)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHERE = ("README.md", "docs", "ada_jax", "configs", "scripts", "tests", "colab", "setup.py")
TEXT = (".py", ".md", ".sh", ".ipynb", ".txt", ".json", ".cfg", ".ini", ".toml", ".yaml", ".yml")
HISTORY = re.compile(r"session [0-9]+|issue #?[0-9]+", re.IGNORECASE)
# a version label standing alone (the v4 task) or in a name (families112_v4); nbformat's own
# module name is not one
VERSION = re.compile(r"(?<![\w.])v[2-9](?![\w.])|_v[2-9](?![0-9])")
# the work's own bookkeeping: the session it was done in, the issue and its numbered items, the
# machine lent to it; a process session (setsid, a pytest fixture's scope) is not one
MAKING = re.compile(r"\bthis session|earlier in the session|between sessions|\bthe issue's|"
                    r"\bthe issue named|\bitem [0-9]+'s\b|\b(?:been|was|were) lent\b|"
                    r"\bnot drawn\)", re.IGNORECASE)


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


def test_no_notes_on_the_making():
    assert _hits(MAKING) == []


def test_the_patterns_catch_what_they_are_for():
    """The guard can fail: each pattern matches the words it exists to keep out."""
    n = "2"  # the examples are built, so that a plain grep of the tree finds none
    for text in ("in session " + n + "0", "Session " + n + "'s task", "issue " + n + "9",
                 "issue #" + n):
        assert HISTORY.search(text), text
    for text in ("the v" + n + " task", "docs/results/families112_v" + n + "/",
                 "families112_v" + n + "_lr1e-3", "(v" + n + ")"):
        assert VERSION.search(text), text
    s, i = "sess" + "ion", "iss" + "ue"
    for text in ("Tried this " + s + " without effect", "before this " + s + " the quick run",
                 "on this " + s + "'s Zen 5 host", "read 0.83 earlier in the " + s,
                 "changed between " + s + "s:", "Against the " + i + "'s targets:",
                 "the padding waste the " + i + " named", "**Item " + n + "'s target",
                 "item " + n + "'s target is now met", "has not been l" + "ent one",
                 "No accelerator was l" + "ent to", "(`status`: not dr" + "awn)"):
        assert MAKING.search(text), text
    for text in ("from nbformat.v4 import", "the session's log", "an issue with", "uv2x",
                 "cu130", "a v2.1 release", "start_new_session=True", "restart the session and run",
                 "built once per session", "how many sessions are busy", "rows.json:item 13: ",
                 "item 4 of the list above", "the target of ≤ 0.8× TRL's CPU time",
                 "keys drawn before the loop", "the issue with", "silently", "not measured on a GPU"):
        for pattern in (HISTORY, VERSION, MAKING):
            assert not pattern.search(text), (pattern.pattern, text)
