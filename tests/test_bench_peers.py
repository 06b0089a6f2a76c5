"""scripts/bench_peers.py's ada_jax path at a toy size (CI has no peers installed: a peer that
cannot be imported is named and skipped, the bench goes on)."""
import importlib.util
import json
import os
import sys

from tests import helpers


def test_bench_peers_ada_jax_path_prints_json():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = helpers.run(
        [sys.executable, os.path.join(root, "scripts", "bench_peers.py"), "--quick", "--sizes",
         "tiny", "--peers", "trl,tunix", "--reps", "1", "--sample_rows", "4",
         "--sample_tokens", "8", "--prompts", "2", "--new_tokens", "8"], cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    tiny = res["sizes"]["tiny"]
    assert tiny["sample"]["ada_jax"]["n_reps"] == 1 and tiny["sample"]["ada_jax"]["median_cpu_s"] > 0
    ada = tiny["grpo"]["ada_jax"]
    assert ada["n_reps"] == 1 and ada["median_learn_cpu_s"] > 0
    assert ada["median_generate_score_cpu_s"] > 0 and 0 < ada["median_completion_len"] <= 8
    assert "tunix" in " ".join(res["skipped"])  # the tunix workers are not written yet
    if importlib.util.find_spec("trl") is None:
        assert any(s.startswith("trl: trl: cannot import") for s in res["skipped"]), res["skipped"]
