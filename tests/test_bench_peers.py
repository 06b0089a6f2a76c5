"""scripts/bench/bench_peers.py's ada_jax path at a toy size (CI has no peers installed: a peer that
cannot be imported is named and skipped, the bench goes on)."""
import importlib.util
import json
import os
import sys

import pytest

from tests import helpers


@pytest.mark.slow  # its sampler and learner: test_sampling.py, test_train.py, test_prefill.py
def test_bench_peers_ada_jax_path_prints_json():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = helpers.run(
        [sys.executable, os.path.join(root, "scripts", "bench", "bench_peers.py"), "--quick", "--sizes",
         "tiny", "--peers", "trl,tunix", "--reps", "1", "--sample_rows", "4",
         "--sample_tokens", "8", "--prompts", "2", "--new_tokens", "8"], cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    tiny = res["sizes"]["tiny"]
    assert tiny["sample"]["ada_jax"]["n_reps"] == 1 and tiny["sample"]["ada_jax"]["median_cpu_s"] > 0
    ada = tiny["grpo"]["ada_jax"]
    assert ada["n_reps"] == 1 and ada["median_learn_cpu_s"] > 0
    assert ada["median_generate_score_cpu_s"] > 0 and 0 < ada["median_completion_len"] <= 8
    for peer in ("trl", "tunix"):
        if importlib.util.find_spec(peer) is None:  # named as skipped, the bench went on
            assert any(s.startswith(f"{peer}: {peer}: cannot import") for s in res["skipped"]), \
                res["skipped"]


def test_bench_gemm_parts_at_a_toy_size():
    """scripts/bench/bench_gemm.py's four parts on tiny shapes: positive GFLOP/s and CPU times, the
    shares from the ablation's own times, and the model's methods put back afterwards."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("bench_gemm", os.path.join(
        root, "scripts", "bench", "bench_gemm.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from ada_jax import model
    before = (model.apply_rope, model.Attention.__call__, model.MLP.__call__)
    g = bench.gemms(64, 16, 32, reps=1, threads=1)
    assert list(g) == ["64x16x32", "64x32x16", "16x64x32", "64x16x16"]
    assert all(row["xla_gflops_per_cpu_s"] > 0 for row in g.values())
    a = bench.ablation(rows=2, prompt=4, new=4, reps=1)
    assert all(a[k] > 0 for k in ("whole", "no_rope", "no_attention", "no_mlp"))
    assert a["mlp_share"] == round(1 - a["no_mlp"] / a["whole"], 3)
    assert (model.apply_rope, model.Attention.__call__, model.MLP.__call__) == before
    d = bench.decode_dtypes(reps=1, d=16, f=32, vocab=64, rows=(2,))
    assert sorted(d) == sorted(f"{kind}_m2" for kind in (
        "mlp_float32", "mlp_bfloat16_result", "mlp_bfloat16_float32_acc", "head_float32",
        "head_bfloat16_in_place", "head_bfloat16_transposed"))
    assert all(v > 0 for v in d.values())
    t = bench.token_draws(reps=1, vocab=300, rows=(2,))
    assert sorted(t) == ["gumbel_m2", "inverse_cdf_m2"] and all(v > 0 for v in t.values())
