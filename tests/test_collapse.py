"""Collapse detection (ada_jax/collapse.py) on the records of the smoke config: at lr 1e-2 its
policy collapses (reward 0 at every step, training-prompt accuracy 0.066 -> 0), at its lr 1e-3
it learns. The end-to-end runs: tests/test_smoke.py."""
import pytest

from ada_jax.collapse import Watch

ACC = "train_eval/avg@32"
# metrics.jsonl of `scripts/train.py --config=configs/base.py:smoke=True` (6 steps, eval every
# 2 on the 8 training prompts), reward and training-prompt accuracy by step.
LR_1E_2 = [{ACC: 0.0664}, {"reward_mean": 0.0}, {"reward_mean": 0.0, ACC: 0.0},
           {"reward_mean": 0.0}, {"reward_mean": 0.0, ACC: 0.0}, {"reward_mean": 0.0},
           {"reward_mean": 0.0, ACC: 0.0}]
LR_1E_3 = [{ACC: 0.0664}, {"reward_mean": 0.0}, {"reward_mean": 0.125, ACC: 0.3008},
           {"reward_mean": 0.2768}, {"reward_mean": 0.5156, ACC: 0.5703},
           {"reward_mean": 0.6027}, {"reward_mean": 0.6987, ACC: 0.7031}]


def _run(records, steps=5, watch=None, start=0):
    watch = watch or Watch(steps, 32)
    first, flags = [], []
    for step, rec in enumerate(records, start):
        rec = dict(rec)
        if watch.update(step, rec):
            first.append(step)
        flags.append(rec.get("collapsed"))
    return first, flags, watch


def test_the_smoke_config_at_lr_1e_2_collapses_and_at_its_lr_does_not():
    first, flags, watch = _run(LR_1E_2)
    assert first == [5] and flags == [0, 0, 0, 0, 0, 1, 1]  # warned once, flagged while so
    assert watch.describe(5, {"update_ratio": 0.034}) == (
        "step 5: the policy collapsed: reward 0 (and training-prompt accuracy 0 where "
        "evaluated) at every step since step 1, after a training-prompt accuracy of 0.0664 at "
        "step 0 (update_ratio now 0.034)")
    assert _run(LR_1E_3)[:2] == ([], [0] * 7)


def test_what_is_not_a_collapse():
    never = [{"reward_mean": 0.0}] * 10  # never solved anything: nothing collapsed
    assert _run(never)[:2] == ([], [0] * 10)
    # a positive training-prompt accuracy inside the zero-reward stretch: not a collapse
    held = [{"reward_mean": 0.5}] + [{"reward_mean": 0.0, ACC: 0.1}, {"reward_mean": 0.0}] * 4
    assert _run(held)[0] == []
    assert _run(LR_1E_2, steps=0)[1] == [None] * 7  # 0 = not watched, no metric
    # it recovers: the flag falls back to 0, no second warning
    first, flags, _ = _run([{"reward_mean": 0.2}] + [{"reward_mean": 0.0}] * 2
                           + [{"reward_mean": 0.1}] + [{"reward_mean": 0.0}] * 2, steps=2)
    assert first == [2] and flags == [0, 0, 1, 0, 0, 1]


@pytest.mark.parametrize("cut", range(1, 7))
def test_a_resumed_watch_judges_as_an_unbroken_one(cut):
    """Its state goes into the checkpoint (train.py): resumed at any step, the same flags."""
    _, whole, _ = _run(LR_1E_2)
    _, head, watch = _run(LR_1E_2[:cut])
    resumed = Watch(5, 32)
    resumed.restore(watch.state())
    first, tail, _ = _run(LR_1E_2[cut:], watch=resumed, start=cut)
    assert head + tail == whole
