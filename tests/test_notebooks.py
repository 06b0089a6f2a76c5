"""The Colab notebooks: generated from colab/make_notebooks.py, and each runs headless end to end
in smoke mode (ADA_JAX_NOTEBOOK_SMOKE=1: seconds-long training, few Monte-Carlo draws)."""
import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLAB = os.path.join(ROOT, "colab")
sys.path.insert(0, COLAB)
import make_notebooks  # noqa: E402

CELL_TIMEOUT_S = 300
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


def test_setup_cell_installs_only_when_ada_jax_is_missing():
    """The guarded `%pip install` is valid IPython inside the except block."""
    from IPython.core.inputtransformer2 import TransformerManager
    src = TransformerManager().transform_cell(make_notebooks.SETUP)
    compile(src, "setup", "exec")
    assert "run_line_magic('pip'" in src and "except ImportError:" in src


def _kernel_env(tmp_path):
    """The test process's environment, minus conftest's 8 fake devices (a notebook runs on what a
    Colab user has: one device), with smoke mode on and scratch runs under tmp_path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ADA_JAX_WORKDIR", "ADA_JAX_RUNS", "ADA_JAX_CONFIG", "ADA_JAX_ROOT",
                        "MPLBACKEND")}
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    env.update(ADA_JAX_NOTEBOOK_SMOKE="1", JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(flags),
               TMPDIR=str(tmp_path))
    return env


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, tmp_path):
    with open(os.path.join(COLAB, f"{name}.ipynb")) as f:
        nb = nbformat.read(f, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": COLAB}})
    client.execute(env=_kernel_env(tmp_path))  # raises CellExecutionError on any cell error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3, name
