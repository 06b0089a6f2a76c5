"""The Colab notebooks: generated from colab/make_notebooks.py, each runs headless end to end
in smoke mode (ADA_JAX_NOTEBOOK_SMOKE=1: seconds-long training, few Monte-Carlo draws), and
their setup cell clones and installs the repository in a simulated fresh Colab runtime."""
import json
import os
import sys
import threading
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLAB = os.path.join(ROOT, "colab")
sys.path.insert(0, COLAB)
import make_notebooks  # noqa: E402
from tests import helpers  # noqa: E402

NOTEBOOKS = sorted(make_notebooks.NOTEBOOKS)


def test_committed_notebooks_match_the_generator():
    for name in NOTEBOOKS:
        with open(os.path.join(COLAB, f"{name}.ipynb")) as f:
            committed = nbformat.read(f, as_version=4)
        nbformat.validate(committed)
        assert committed == make_notebooks.build(name), (
            f"colab/{name}.ipynb is stale: run python colab/make_notebooks.py")
        assert not any(c.get("outputs") or c.get("execution_count")
                       for c in committed.cells if c.cell_type == "code"), name


# Runs the setup cell in a fresh interpreter with nothing installed (python -I -S: no
# site-packages), twice, from argv's cwd. `git clone` is a copy of this checkout's package
# (no network) and `pip install` writes only the ada_jax distribution's metadata into a
# scratch site folder, so the second run finds it installed. Prints what happened as JSON.
_FRESH_RUNTIME = r'''
import json, os, shutil, subprocess, sys, types
setup, cwd, colab, repo, site = json.loads(sys.argv[1])
if colab:
    sys.modules["google.colab"] = types.ModuleType("google.colab")
sys.path.append(site)
calls = []


def check_call(cmd, **kwargs):
    calls.append(cmd)
    if cmd[:2] == ["git", "clone"]:
        shutil.copytree(os.path.join(repo, "ada_jax"), os.path.join(cmd[-1], "ada_jax"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(os.path.join(repo, "setup.py"), cmd[-1])
    elif cmd[1:4] == ["-m", "pip", "install"]:
        info = os.path.join(site, "ada_jax-0.1.0.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: ada_jax\nVersion: 0.1.0\n")


subprocess.check_call = check_call
os.chdir(cwd)
roots = []
for _ in range(2):
    scope = {}
    exec(setup, scope)
    roots.append(scope["ROOT"])
import ada_jax
print(json.dumps(dict(roots=roots, package=ada_jax.__file__, calls=calls)))
'''


def _fresh_runtime(cwd, colab, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    arg = json.dumps([make_notebooks.SETUP, str(cwd), colab, ROOT, str(site)])
    out = helpers.run([sys.executable, "-I", "-S", "-c", _FRESH_RUNTIME, arg])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_setup_cell_in_a_fresh_colab_runtime(tmp_path):
    """Colab's cwd is /content, with no checkout: the cell clones REPO_URL into ./ada_jax,
    pip-installs it once, and ada_jax imports from the clone without a restart."""
    content = tmp_path / "content"
    content.mkdir()
    got = _fresh_runtime(content, True, tmp_path)
    clone = str(content / "ada_jax")
    assert got["roots"] == [clone, clone]
    assert got["package"] == os.path.join(clone, "ada_jax", "__init__.py")
    assert [c[:3] for c in got["calls"]] == [["git", "clone", "--depth=1"],
                                             [sys.executable, "-m", "pip"]]
    assert got["calls"][0][-2:] == [make_notebooks.REPO_URL, clone]
    assert got["calls"][1][-2:] == ["-e", clone]


def test_setup_cell_in_a_checkout(tmp_path):
    """From the checkout's colab/ folder (as the tests run it) ROOT is the checkout, never
    `/`, and nothing is cloned; outside a checkout and outside Colab the cell stops."""
    got = _fresh_runtime(COLAB, False, tmp_path)
    assert got["roots"] == [ROOT, ROOT] and ROOT != os.sep
    assert got["package"] == os.path.join(ROOT, "ada_jax", "__init__.py")
    assert not [c for c in got["calls"] if c[0] == "git"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(AssertionError, match="FileNotFoundError: no ada_jax checkout"):
        _fresh_runtime(elsewhere, False, elsewhere)


def test_every_notebook_opens_with_a_colab_badge():
    for name in NOTEBOOKS:
        first = make_notebooks.build(name).cells[0]
        assert first.cell_type == "markdown" and "colab-badge.svg" in first.source, name
        assert f"/blob/{make_notebooks.BRANCH}/colab/{name}.ipynb" in first.source, name


def _kernel_env(tmp_path):
    """The test process's environment, minus conftest's 8 fake devices (a notebook runs on what a
    Colab user has: one device), with smoke mode on and scratch runs under tmp_path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ADA_JAX_WORKDIR", "ADA_JAX_RUNS", "ADA_JAX_CONFIG", "ADA_JAX_ROOT",
                        "MPLBACKEND")}
    env.update(ADA_JAX_NOTEBOOK_SMOKE="1", JAX_PLATFORMS="cpu",
               XLA_FLAGS=helpers.one_device_flags(),
               TMPDIR=str(tmp_path))
    return env


class _WatchedClient(nbclient.NotebookClient):
    """Cells without a fixed time limit (before: 300 s each, which a loaded machine overran):
    the kernel is killed, and the test fails, when it has neither sent output nor used CPU
    for helpers.STALL_S seconds (a hang)."""
    outputs = 0

    def output(self, *args, **kwargs):
        self.outputs += 1
        return super().output(*args, **kwargs)

    def _kernel(self):
        """The kernel's process (psutil), or None before it starts."""
        import psutil
        pid = getattr(getattr(self.km, "provisioner", None), "pid", None)
        try:
            return psutil.Process(pid) if pid else None
        except psutil.Error:
            return None

    def _progress(self):
        kernel = self._kernel()
        try:
            return self.outputs, sum(kernel.cpu_times()[:2]) if kernel else 0.0
        except Exception:  # psutil.Error: it just ended
            return self.outputs, None

    def execute_watched(self, **kwargs):
        stalled, done = [], threading.Event()

        def watchdog():
            seen, since = self._progress(), time.monotonic()
            while not done.wait(5):
                if (now := self._progress()) != seen:
                    seen, since = now, time.monotonic()
                elif time.monotonic() - since > helpers.STALL_S and self._kernel():
                    stalled.append(True)
                    self._kernel().kill()
                    return
        watcher = threading.Thread(target=watchdog, daemon=True)
        watcher.start()
        try:
            return self.execute(**kwargs)
        except Exception:
            if stalled:
                pytest.fail(f"the kernel sent no output and used no CPU for "
                            f"{helpers.STALL_S} s (a hang?)")
            raise
        finally:
            done.set()


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, tmp_path):
    with open(os.path.join(COLAB, f"{name}.ipynb")) as f:
        nb = nbformat.read(f, as_version=4)
    client = _WatchedClient(nb, timeout=None, kernel_name="python3",
                            resources={"metadata": {"path": COLAB}})
    client.execute_watched(env=_kernel_env(tmp_path))  # CellExecutionError on any cell error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3, name
