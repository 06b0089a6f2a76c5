"""docs/results_index.json: every documented result names its commit and base, and a file it
depends on changed since that commit fails the check unless declared (scripts/tools)."""
import json
import os
import shutil
import subprocess

import pytest
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIT = shutil.which("git") is not None and os.path.exists(os.path.join(ROOT, ".git"))
SHALLOW = GIT and subprocess.run(["git", "-C", ROOT, "rev-parse", "--is-shallow-repository"],
                                 capture_output=True, text=True).stdout.strip() == "true"


def _tool():
    return helpers.load_script("scripts/tools/check_results.py")


@pytest.mark.skipif(not GIT or SHALLOW, reason="needs git and the repository's whole history")
def test_every_documented_result_is_current_or_declared():
    tool = _tool()
    results = tool.load()
    assert results and all(r["commit"] and r["base"] and r["where"] for r in results)
    assert tool.problems(results) == []


def _git(d, *args):
    subprocess.run(["git", "-C", d, *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_change_needs_a_rerun_or_a_declaration_of_that_content(tmp_path, monkeypatch):
    d = str(tmp_path)
    _git(d, "init", "-q")
    _git(d, "config", "user.email", "t@t")
    _git(d, "config", "user.name", "t")
    os.makedirs(os.path.join(d, "pkg"))
    with open(os.path.join(d, "pkg", "a.py"), "w") as f:
        f.write("x = 1\n")
    _git(d, "add", "-A")
    _git(d, "commit", "-qm", "c")
    head = subprocess.run(["git", "-C", d, "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    os.makedirs(os.path.join(d, "docs"))
    index = os.path.join(d, "docs", "results_index.json")
    with open(index, "w") as f:
        json.dump({"results": [{"id": "r", "where": ["docs/x.md"], "commit": head,
                                "base": "b", "depends_on": ["pkg"]}]}, f)
    tool = _tool()
    monkeypatch.setattr(tool, "ROOT", d)
    monkeypatch.setattr(tool, "INDEX", index)
    assert tool.main([]) == 0
    with open(os.path.join(d, "pkg", "a.py"), "w") as f:
        f.write("x = 2\n")
    assert tool.problems(tool.load()) and tool.main([]) == 1
    assert tool.main(["--declare", "r", "pkg/a.py", "--why", "a rename"]) == 0
    assert tool.main([]) == 0
    with open(os.path.join(d, "pkg", "a.py"), "w") as f:  # declared content only
        f.write("x = 3\n")
    assert tool.main([]) == 1
    with open(os.path.join(d, "pkg", "b.py"), "w") as f:  # a new file counts too
        f.write("y = 1\n")
    assert len(tool.problems(tool.load())) == 2
    _git(d, "add", "-A")
    _git(d, "commit", "-qm", "rerun")
    assert tool.main(["--rerun", "r", "--commit", "HEAD"]) == 0
    assert tool.main([]) == 0
