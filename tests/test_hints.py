"""Self-hinting schedulers (ada_jax/hints.py) against a scripted engine."""
import jax
import numpy as np

from ada_jax import hints, selection
from ada_jax.tasks.problem import Problem

G, N = 4, 3


def _batch(pos_B, n=G):
    """A Batch whose prompt b holds pos_B[b] positives out of n kept samples."""
    pos_B = np.asarray(pos_B)
    B = len(pos_B)
    reward = (np.arange(G)[None, :] < pos_B[:, None]).astype(np.float32)
    return selection.Batch(
        tokens_BGN=np.zeros((B, G, N), np.int32), logp_BGN=np.zeros((B, G, N), np.float32),
        len_BG=np.ones((B, G), np.int32), reward_BG=reward, mask_BG=np.ones((B, G), bool),
        pool_n_B=np.full(B, n), pool_pos_B=pos_B, version_BG=np.zeros((B, G), np.int32))


PROBLEMS = [Problem(id=i, question=f"q{i}", answer="7",
                    solution="Step one.\nStep two.\nStep three.\n\\boxed{7}") for i in range(4)]


def test_sage_escalates_only_collapsed_prompts_and_counts_rescues():
    """Prompt 0 is mixed without hints; 1 turns mixed at level 1; 2 turns all correct at level 2
    (stops, not rescued); 3 stays all wrong through level 3."""
    outcome = {1: {1: 2}, 2: {1: 0, 2: 4}, 3: {1: 0, 2: 0, 3: 0}}  # prompt -> level -> positives
    calls = []

    def engine(problems, key, budgets, hint_texts):
        level = len(calls) + 1
        calls.append((np.asarray(budgets).copy(), list(hint_texts)))
        pos = [outcome.get(i, {}).get(level, 0) if b else 0 for i, b in enumerate(budgets)]
        toks = np.full((len(problems), 5), level)
        return _batch(pos), toks, np.ones_like(toks, bool), {"samples_total": int(
            np.sum(budgets)), "generated_tokens": 10 * level,
            "samples_launched": int(np.sum(budgets)) + level}

    start = _batch([2, 0, 0, 0])
    toks0 = np.zeros((4, 5), int)
    batch, toks, mask, m = hints.sage(engine, PROBLEMS, start, toks0, np.ones_like(toks0, bool),
                                      jax.random.key(0), np.full(4, G))
    # Budgets: only the still-collapsed prompts are re-rolled at each level.
    assert [c[0].tolist() for c in calls] == [[0, 4, 4, 4], [0, 0, 4, 4], [0, 0, 0, 4]]
    assert calls[0][1][0] == "" and calls[0][1][1] == hints.make_hint(PROBLEMS[1], 1)
    assert calls[2][1][3] == hints.make_hint(PROBLEMS[3], 3)
    assert np.asarray(batch.pool_pos_B).tolist() == [2, 2, 4, 0]
    assert toks[:, 0].tolist() == [0, 1, 2, 3]  # each row's prompt is the hinted one it kept
    assert m["hint_collapsed_share"] == 0.75
    assert m["hint_rescued_share"] == 1 / 3 and m["hint_all_correct_share"] == 1 / 3
    assert m["hint_level_mean"] == (1 + 2 + 3) / 3
    assert m["samples_total"] == 12 + 8 + 4 and m["generated_tokens"] == 10 + 20 + 30
    assert m["samples_launched"] == (12 + 1) + (8 + 2) + (4 + 3)  # the cost counts every re-roll
    after = selection.kept_metrics(batch)
    assert after["effective_prompt_ratio"] == 0.5 and after["all_wrong_after"] == 0.25


def test_sage_light_levels_move_with_accuracy():
    state = {}
    levels = hints.light_levels(PROBLEMS, state)
    assert levels == [0, 0, 0, 0]
    hints.light_update(PROBLEMS, _batch([0, 1, 2, 4]), [0, 2, 2, 3], state)
    # all wrong: up (capped at 3); 1/4 right: unchanged; >= 1/2 right: down (floored at 0).
    assert hints.light_levels(PROBLEMS, state) == [1, 2, 1, 2]
    hints.light_update(PROBLEMS, _batch([0, 0, 4, 4]), [3, 2, 0, 2], state)
    assert hints.light_levels(PROBLEMS, state) == [3, 3, 0, 1]
    texts = hints.light_hints(PROBLEMS, [0, 1, 0, 3])
    assert texts[0] == "" and texts[1] == "Step one." and texts[3] == hints.make_hint(PROBLEMS[3], 3)
