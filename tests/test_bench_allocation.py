"""scripts/bench/bench_allocation.py: each allocation method against uniform sampling on its own
objective at the family task's pass rates (conformal stopping: its samples a prompt, calibration
included, which at these rates cost more than uniform's). A method that loses to uniform there has a defect;
so do the rules these replaced (the Beta(1, 16)-posterior inputs, VIP on raw last-visit rates),
which the test shows the bench can tell apart."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def rows():
    spec = importlib.util.spec_from_file_location(
        "bench_allocation", os.path.join(ROOT, "scripts", "bench", "bench_allocation.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.bench(60)


@pytest.mark.parametrize("method", ["knapsack", "vip", "pilot_commit"])
def test_each_method_beats_uniform_on_its_own_objective(rows, method):
    r = rows[method]
    assert r["beats_uniform"], r


def test_the_inverted_inputs_lose_and_the_authors_rules_spend_on_hard_prompts(rows):
    assert not rows["knapsack_beta"]["beats_uniform"]
    assert not rows["vip_beta"]["beats_uniform"]
    assert not rows["vip_raw"]["beats_uniform"]
    uni = rows["uniform"]["share_p_le_0_1"]
    for m in ("knapsack", "vip", "vip_raw"):
        assert rows[m]["share_p_le_0_1"] > uni > rows[m + "_beta" if m != "vip_raw" else
                                                       "vip_beta"]["share_p_le_0_1"]
    assert rows["vip"]["variance"] <= rows["vip"]["variance_uniform"]


def test_vip_on_a_fresh_stream_moves_budgets_only_when_keyed_on_labels(rows):
    """By question text a fresh prompt is near no observed one, so VIP stays uniform; by the
    family labels each fresh prompt is predicted from its family's visits."""
    assert rows["vip"]["fresh_budgets_changed"] < 2 < 8 < rows["vip_labels"]["fresh_budgets_changed"]


def test_conformal_counts_its_calibration_samples(rows):
    """In training it stops at most at the grid's top; its figure adds the held-out 64 x 16
    samples, shared over the prompts the run trains (more than uniform's 16 at these rates)."""
    c = rows["conformal"]
    assert c["in_training"] <= c["uniform"]
    assert c["calibration_per_prompt"] == pytest.approx(64 * 16 / (16 * c["run_steps"]))
    assert c["method"] == pytest.approx(c["in_training"] + c["calibration_per_prompt"])


def test_conformal_covers(rows):
    c = rows["conformal"]
    assert c["coverage_first_level"] >= 1 - c["delta"] - 0.02
