"""Documented results against the code that made them (docs/results_index.json).

Each result names the commit whose code made it, the base it started from, where the docs
state it, and the files it depends on. A file changed since that commit makes the result
unconfirmed unless the change is declared not to affect it: a declaration pins the file's
content (its git blob), so a later change to the same file needs a new look. A result marked
stale (the docs say so where they state it) is listed, not failed.

  python scripts/tools/check_results.py                      # exit 1: undeclared changes
  python scripts/tools/check_results.py --declare ID PATH --why "..."   # after a review
  python scripts/tools/check_results.py --rerun ID --commit SHA         # after a re-run
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INDEX = os.path.join(ROOT, "docs", "results_index.json")


def _git(*args) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True,
                          text=True).stdout


def blob(path: str) -> str:
    """The git blob id of the file as it is in the tree now ("deleted" when absent)."""
    full = os.path.join(ROOT, path)
    return _git("hash-object", full).strip() if os.path.exists(full) else "deleted"


def changed_since(commit: str, paths: list[str]) -> list[str]:
    """Files under `paths` that differ between `commit` and the working tree."""
    out = _git("diff", "--name-only", commit, "--", *paths)
    untracked = _git("ls-files", "--others", "--exclude-standard", "--", *paths)
    return sorted(set(out.split()) | set(untracked.split()))


def load() -> list[dict]:
    with open(INDEX) as f:
        return json.load(f)["results"]


def problems(results: list[dict]) -> list[str]:
    """One line per undeclared change to a file a current result depends on."""
    out = []
    for r in results:
        if r.get("stale"):
            continue
        try:
            _git("cat-file", "-e", f"{r['commit']}^{{commit}}")
        except subprocess.CalledProcessError:
            out.append(f"{r['id']}: commit {r['commit']} is not in this repository's history")
            continue
        declared = r.get("declared", {})
        for path in changed_since(r["commit"], r["depends_on"]):
            if declared.get(path, {}).get("blob") != blob(path):
                out.append(f"{r['id']}: {path} changed after {r['commit'][:10]} (the code that "
                           f"made it): re-run the result, or review the change and declare it: "
                           f"python scripts/tools/check_results.py --declare {r['id']} {path} "
                           f"--why '...'")
    return out


def _save(doc: dict) -> None:
    with open(INDEX, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--declare", nargs=2, metavar=("ID", "PATH"))
    ap.add_argument("--why", default="")
    ap.add_argument("--rerun", metavar="ID")
    ap.add_argument("--commit", default="")
    a = ap.parse_args(argv)
    with open(INDEX) as f:
        doc = json.load(f)
    by_id = {r["id"]: r for r in doc["results"]}
    if a.declare:
        rid, path = a.declare
        if rid not in by_id or not a.why:
            ap.error(f"--declare needs a result id of {INDEX} ({', '.join(by_id)}) and --why")
        by_id[rid].setdefault("declared", {})[path] = {"blob": blob(path), "why": a.why}
        _save(doc)
        return 0
    if a.rerun:
        if a.rerun not in by_id or not a.commit:
            ap.error(f"--rerun needs a result id ({', '.join(by_id)}) and --commit")
        by_id[a.rerun].update(commit=_git("rev-parse", a.commit).strip(), declared={})
        by_id[a.rerun].pop("stale", None)
        _save(doc)
        return 0
    bad = problems(doc["results"])
    for r in doc["results"]:
        if r.get("stale"):
            print(f"stale (the docs say so): {r['id']}: {r['stale']}")
    for line in bad:
        print(line)
    print(f"{len(doc['results'])} results, {len(bad)} undeclared changes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
