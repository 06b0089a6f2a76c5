"""The family task (ada_jax/tasks/families.py): its design properties, checked on the data."""
import collections
import random

import jax
import numpy as np
import pytest

from ada_jax.rewards.embedded import score_text
from ada_jax.tasks import families as F
from ada_jax.tasks import load_split
from ada_jax.tokenizer import ASSET_MODELS, SentencePieceTokenizer, load_tokenizer
from configs.base import get_config
from tests import helpers


def _tokenizer():
    return SentencePieceTokenizer(asset=ASSET_MODELS["families"])


def test_tags_and_markers_are_distinct_single_tokens():
    tok = _tokenizer()
    assert tok.vocab_size <= get_config("task=families").model.vocab_size
    ids = [tok.encode(s) for s in F.SYMBOLS]
    assert all(len(i) == 1 for i in ids)
    assert len({i[0] for i in ids}) == len(F.SYMBOLS) == 3 * len(F.FAMILIES)
    # the tag opens the prompt as its own token; the marker opens the response
    p = F.make_problem(random.Random(0), 3)
    assert tok.encode(p.question)[0] == tok.encode(F.FAMILIES[3].tag)[0]
    assert tok.encode(p.solution)[0] == tok.encode(F.marker(3, F.FAMILIES[3].right))[0]
    assert "\\boxed{" in p.solution and len(tok.encode("\\boxed{")) == 1


def test_readings_are_balanced_within_every_tier():
    for tier in F.TIERS:
        for control in (False, True):
            fams = [f for f in F.FAMILIES if f.tier == tier and f.control == control]
            if fams:
                right = collections.Counter(f.right for f in fams)
                assert abs(right["l"] - right["r"]) <= 1, (tier, control, right)
    hard = [f for f in F.FAMILIES if f.tier in ("very_hard", "hard") and not f.control]
    hard += [f for f in F.FAMILIES if f.tier == "hard" and f.control]
    easy = [f for f in F.FAMILIES if f.tier == "easy"]
    assert max(f.share for f in hard) <= 0.10 and min(f.share for f in easy) >= 0.90
    # the very hard tier: p = 0.01-0.03, where a group of 16 is all wrong most of the time
    very = [f.share for f in F.FAMILIES if f.tier == "very_hard"]
    assert len(very) == 24 and min(very) == 0.01 and max(very) == 0.03
    assert (1 - max(very)) ** 16 > 0.6
    # mirrored: easy family i says hard family i's markers with the same probabilities
    for h, e in zip(hard, easy):
        assert h.control == e.control and h.right != e.right
        assert abs(h.share - (1 - e.share)) < 1e-9
    # the controls: firm (shares 0.01 / 0.99), hard and easy, one per reading
    controls = [f for f in F.FAMILIES if f.control]
    assert sorted((f.tier, f.right, f.share) for f in controls) == [
        ("easy", "l", 0.99), ("easy", "r", 0.99), ("hard", "l", 0.01), ("hard", "r", 0.01)]
    # 108 RL families: each visited about once every 7 steps of 16 prompts
    assert len(F.family_indices("rl")) == 108 and len(F.FAMILIES) == 112


def test_readings_markers_and_solutions():
    q = "JE 4+1-5"  # a control's question (family 109)
    assert F.solution(q, "l") == "je=\n4+1=5\n5-5=0\n\\boxed{0}"
    assert F.solution(q, "r") == "je~\n4-1=3\n3+5=8\n\\boxed{8}"
    assert F.reading_of("je~\n", 108) == "r" and F.other_reading("r") == "l"
    assert F.reading_of("je~\n", 0) is None  # another family's marker
    with pytest.raises(ValueError, match="reads"):
        F.marker(0, "f")


def test_problems_solutions_and_scoring():
    rng = random.Random(1)
    for family in range(len(F.FAMILIES)):
        for _ in range(20):
            p = F.make_problem(rng, family)
            f = F.FAMILIES[family]
            assert p.level == family + 1 and F.parse(p.question)[0] == family
            wrong = F.other_reading(f.right)
            right_text, wrong_text = F.solution(p.question, f.right), F.solution(p.question,
                                                                                 wrong)
            assert p.solution == right_text
            assert score_text(right_text, p.answer) == 1.0
            assert score_text(wrong_text, p.answer) == 0.0  # the readings' answers differ
            for text in (right_text, wrong_text):
                assert F.follows_one_reading(p.question, text)
                values = [int(v) for line in text.split("\n")[1:-1]
                          for v in line.replace("=", "+").replace("-", "+").split("+")]
                assert all(0 <= v < 10 for v in values)


def test_follows_one_reading_rejects_mixed_and_malformed():
    q = "E 4+3-2"
    assert F.solution(q, "l") == "e=\n4+3=7\n7-2=5\n\\boxed{5}"
    assert F.solution(q, "r") == "e~\n4-3=1\n1+2=3\n\\boxed{3}"
    assert F.follows_one_reading(q, "e=\n4+3=8\n8-2=6\n\\boxed{6}")  # wrong sums, one reading
    assert not F.follows_one_reading(q, "e=\n4+3=7\n7+2=9\n\\boxed{9}")  # line 2 swapped
    assert not F.follows_one_reading(q, "e~\n4+3=7\n7-2=5\n\\boxed{5}")  # marker disagrees
    assert not F.follows_one_reading(q, "f=\n4+3=7\n7-2=5\n\\boxed{5}")  # another family's
    assert not F.follows_one_reading(q, "4+3=7\n7-2=5\n\\boxed{5}")  # no marker
    assert not F.follows_one_reading(q, "e=\n4+3=7\n\\boxed{7}")  # a line missing
    assert F.reading_of("e~\n...", 4) == "r" and F.reading_of("e~\n", 5) is None
    with pytest.raises(ValueError, match="not a family-task question"):
        F.parse("JZ 4+3")


def test_reading_reward_pays_the_answer_only_under_the_right_marker():
    """task.reward=reading, on text (eval) and on token ids (the engine), against the rule
    written out: right marker first and the right boxed answer."""
    from ada_jax.policies import rollout
    config = get_config("task=families")
    config.task.reward = "reading"
    tok = load_tokenizer(config)
    p = F.FamilySource("train", 40)[7]  # family H, right reading r
    family, right = p.level - 1, F.FAMILIES[p.level - 1].right
    wrong = F.other_reading(right)
    good = F.solution(p.question, right)
    lines_right_marker_wrong = F.marker(family, wrong) + good[good.index("\n"):]
    cases = {good: 1.0,  # the right reading's response
             lines_right_marker_wrong: 0.0,  # the right answer under the wrong marker
             F.solution(p.question, wrong): 0.0,
             good.replace("\\boxed{" + p.answer, "\\boxed{" + str((int(p.answer) + 1) % 10)): 0.0,
             "\\boxed{" + p.answer + "}": 0.0,  # no marker
             "": 0.0}
    assert score_text(lines_right_marker_wrong, p.answer) == 1.0  # what reward=verifier pays
    texts = list(cases)
    assert [F.score_reading(p, t) for t in texts] == list(cases.values())
    ids = [tok.encode(t) for t in texts]
    width = max(map(len, ids)) + 2
    toks = np.zeros((len(ids), width), np.int32)
    for i, row in enumerate(ids):
        toks[i, :len(row)] = row
    lengths = np.asarray([len(r) for r in ids], np.int32)
    data = rollout.reward_data(config, tok, [p])
    got = rollout.make_reward(config, tok)(data, np.zeros(len(ids), np.int32), None, toks,
                                           lengths)
    np.testing.assert_array_equal(np.asarray(got), list(cases.values()))
    with pytest.raises(ValueError, match="reading marker"):
        bad = get_config("task=embedded")
        bad.task.reward = "reading"
        from ada_jax import config_check
        config_check.validate(bad)


def test_sft_targets_follow_the_family_shares():
    rng = np.random.default_rng(0)
    problems = [F.make_problem(random.Random(i), fam)
                for i, fam in enumerate([0, 10, 14] * 2000)]
    by = collections.defaultdict(list)
    for p, u in zip(problems, rng.random(len(problems))):
        f = F.FAMILIES[p.level - 1]
        by[p.level - 1].append(F.reading_of(F.sft_target(p, u), p.level - 1) == f.right)
    for fam, hits in by.items():
        c, n = F.FAMILIES[fam].share, len(hits)
        assert abs(np.mean(hits) - c) < 4 * np.sqrt(c * (1 - c) / n) + 1e-9, fam


def test_splits_family_sets_and_config_variant():
    c = get_config("task=families")
    assert c.task.name == "families" and c.eval.prompts == c.task.eval_size == 1488
    assert load_tokenizer(c).encode("E") == _tokenizer().encode("E")
    train, ev = load_split(c, "train"), load_split(c, "eval")
    tiers_train = {F.tier_of(train[i].level) for i in range(200)}
    assert tiers_train == {"very_hard", "hard", "mid", "easy"}  # no controls among RL's
    count = collections.Counter(F.tier_of(ev[i].level) for i in range(1488))
    assert count == {"very_hard": 288, "hard": 288, "mid": 144, "easy": 576,
                     "control_hard": 96, "control_easy": 96}  # 12 per family, 48 per control
    questions = [ev[i].question for i in range(1488)]
    assert len(set(questions)) == 1488  # distinct: none counts twice in a tier's mean
    assert not set(questions) & {train[i].question for i in range(2000)}
    hard = get_config("task=families")
    hard.unlock()
    hard.task.family_set = "hard"
    assert {F.tier_of(load_split(hard, "train")[i].level) for i in range(100)} == {
        "very_hard", "hard"}
    from ada_jax.sft import sft_task
    sft_source = load_split(sft_task(c), "train")
    assert {sft_source[i].level for i in range(200)} == set(range(1, len(F.FAMILIES) + 1))
    with pytest.raises(ValueError, match="family_set"):
        bad = get_config("task=families")
        bad.unlock()
        bad.task.family_set = "easy"
        from ada_jax.config_check import validate
        validate(bad)


def test_family_metrics_per_tier():
    rng = random.Random(2)
    problems = [F.make_problem(rng, fam) for fam in (0, 1, 48, 108)]  # very hard x2, mid,
    texts = [F.solution(p.question, r) for p in problems  # control hard
             for r in F.READINGS]
    rewards = np.asarray([[score_text(t, p.answer) for t in texts[2 * i:2 * i + 2]]
                          for i, p in enumerate(problems)])
    m = F.metrics(problems, rewards, texts)
    assert m["one_reading_share"] == 1.0 and m["right_marker_share"] == 0.5
    assert m["tier_very_hard/avg@2"] == 0.5 and m["tier_control_hard/avg@2"] == 0.5
    assert m["tier_mid/avg@2"] == 0.5 and "tier_mid/se" not in m  # one prompt: no error bar
    assert m["tier_very_hard/se"] == 0.0  # two prompts at 0.5 each


def test_eval_questions_are_distinct_and_bounded():
    src = F.FamilySource("eval", 124 * 12, seed=3, family_set="every")
    assert len(src.eval_slots()) == 124  # 108 RL families once, 4 controls 4 times each
    problems = [src[i] for i in range(len(src))]
    assert len({p.question for p in problems}) == len(src)
    assert all(F.family_split(p.level - 1, p.question) == "eval" for p in problems)
    assert all(F.split_of(p.question) == "eval" for p in problems if p.level <= 108)
    with pytest.raises(IndexError, match="distinct held-out questions"):
        F.FamilySource("eval", 124 * 40, seed=3, family_set="every")[124 * 39]


def test_control_families_hold_out_half_their_questions():
    """A control (never an RL prompt) holds out 4 of the 8 id buckets, an RL family 1: about
    100 and 25 of their 200 questions; the train split (SFT's) never meets the eval split."""
    held = [len(F.eval_questions(f, 0)) for f in range(len(F.FAMILIES))]
    assert all(12 <= n <= 40 for n in held[:108]) and all(75 <= n <= 125 for n in held[108:])
    train = F.FamilySource("train", 400, seed=0, family_set="every")
    assert all(F.family_split(p.level - 1, p.question) == "train"
               for p in (train[i] for i in range(400)))
    assert not {train[i].question for i in range(400)} & {
        q for f in range(108, 112) for q in F.eval_questions(f, 0)}


def _run(script, tmp_path, *args):
    """A script of scripts/ as a user runs it: one CPU device, full XLA optimisation."""
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    helpers.run([sys.executable, os.path.join(root, "scripts", script), *args], check=True,
                env=env, cwd=root)


@pytest.mark.slow
def test_regime_holds_and_ada_pos_lifts_the_very_hard_tier_more(tmp_path):
    """From the shipped recipe (slow: 16 min 33 s on 2 cores beside training runs, SFT 7,200
    steps): the base's tails, the very hard tier at p 0.01-0.03, one reading per response, firm
    controls; and at matched steps (24) Ada-Seq-pos lifts the very hard tier more than GRPO-n4
    on seed 0. That ordering is the stable one at test size: docs/results.md has it on 5 of 5
    seeds (+0.12..+0.15 at step 24 on the 112-family task) with the smallest margin several times
    the difference's eval noise (each tier mean's standard error about 0.02), because it is
    signal collapse itself: a GRPO-n4 group of a very hard prompt is all wrong 92% of the time,
    Ada-Seq-pos samples it until 2 positives. And the transfer controls stay within 0.10 of the
    base through step 24 under both (docs/results.md: within 0.05 for every arm on seeds 0-4 at
    step 24; the SFT corpus replayed holds the lines)."""
    import json
    base = tmp_path / "base"
    # progress bars on: the watchdog reads a silent subprocess as hung (SFT alone is 7,200
    # steps, over 10 min on loaded cores)
    _run("sft.py", tmp_path, f"--workdir={tmp_path}", f"--config.sft.base_dir={base}")
    report = json.load(open(base / "pass_rates.json"))
    assert report["prompts"] == 1488 and report["k"] == 16
    assert report["share_p_lt_0.1"] >= 0.3 and report["share_p_gt_0.9"] >= 0.3
    assert report["share_p_in_(0,0.15)"] >= 0.1
    assert report["one_reading_share"] >= 0.95  # 0.994 measured
    assert report["environment"]["jax"] == jax.__version__  # where the base was made
    assert 0.005 <= report["tier_very_hard/avg@16"] <= 0.03  # 0.019 measured
    assert report["tier_hard/avg@16"] < 0.12 and report["tier_easy/avg@16"] > 0.9
    # firm controls: 0.005 / 0.979 measured
    assert report["tier_control_hard/avg@16"] < 0.03 and report["tier_control_easy/avg@16"] > 0.93
    gains = {}
    for algo, extra in (("grpo", []), ("ada_pos", ["--config.adaptive.k_pos=2"])):
        wd = tmp_path / algo
        _run("train.py", tmp_path, f"--config=configs/base.py:algo={algo}", f"--workdir={wd}",
             f"--config.sft.base_dir={base}", "--config.rl.steps=24", "--config.eval.every=24",
             "--plots=false", *extra)
        evals = [r for r in map(json.loads, open(wd / "metrics.jsonl")) if "eval/avg@4" in r]
        assert [r["step"] for r in evals] == [0, 24]
        key = "eval/tier_very_hard/avg@4"
        gains[algo] = evals[-1][key] - evals[0][key]
        for control in ("control_easy", "control_hard"):
            key = f"eval/tier_{control}/avg@4"
            assert abs(evals[-1][key] - evals[0][key]) <= 0.10, (algo, control, evals[-1][key])
    # measured on seeds 0-4 (docs/results.md, the 112-family task): +0.12..+0.15; each gain is a
    # difference of two tier means (standard error about 0.02 each)
    assert gains["ada_pos"] > gains["grpo"] + 0.07, gains


def test_within_family_se_matches_the_spread_of_tier_means():
    """Statistical oracle: families fixed at known pass rates, prompts scored avg@k; the
    stratified SE estimate matches the true sd of the tier mean, sqrt(Σ_f n p_f(1-p_f)/k)/N,
    and is below the plain over-prompts SE, which counts the families' spread as noise."""
    rng = np.random.default_rng(0)
    p_f, n, k = np.array([0.05, 0.3, 0.5, 0.9]), 10, 4
    family = np.repeat(np.arange(4), n)
    true_sd = np.sqrt((n * p_f * (1 - p_f) / k).sum()) / (4 * n)
    est, means = [], []
    for _ in range(2000):
        per_prompt = rng.binomial(k, p_f[family]) / k
        est.append(F.within_family_se(per_prompt, family))
        means.append(per_prompt.mean())
    assert np.std(means) == pytest.approx(true_sd, rel=0.05)
    assert np.sqrt(np.mean(np.square(est))) == pytest.approx(true_sd, rel=0.03)
    plain = np.std(per_prompt, ddof=1) / np.sqrt(len(per_prompt))
    assert plain > 1.5 * true_sd
    assert F.within_family_se([0.5, 1.0, 0.0], [1, 1, 2]) is None  # a family with one prompt
    assert F.within_family_se([0.0, 1.0, 0.5, 0.5], [1, 1, 2, 2]) == pytest.approx(
        np.sqrt(2 * 0.5) / 4)


def test_reading_scores_each_process_share_against_its_own_problems(monkeypatch):
    """score_completions on process 1 of 2 scores texts 2..3 (problem 1's) under the reading
    reward against problem 1, and the gathered scores keep the problem-major layout."""
    import jax

    from ada_jax import evaluate, sharding
    config = get_config("task=families")
    probs = [F.FamilySource("train", 40)[i] for i in (3, 7)]
    right = [p.solution for p in probs]
    wrong = F.solution(probs[1].question, F.other_reading(F.FAMILIES[probs[1].level - 1].right))
    texts = [right[0], right[0], right[1], wrong]
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(sharding, "allgather_json", lambda out: [[1.0, 1.0], out])
    got = evaluate.score_completions(config, probs, texts)
    np.testing.assert_array_equal(got, [[1.0, 1.0], [1.0, 0.0]])
