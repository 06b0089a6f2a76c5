"""VIP, variance-informed predictive allocation (adaptive.policy='vip', ICLR 2026, arXiv
2602.01601) as its authors run it (HieuNT91/VIP, allocation/bernoulli_allocation.py and
success_rate_prediction/gaussian_process.py):

- prediction: a Gaussian process over prompts in logit space (allocation.gp_logit_mean: RBF
  kernel of length length_scale over a distance between prompts, prior mean prior_logit,
  each observed prompt's last visit as its observation: (k + s)/(n + 2s) with s =
  smoothing, 0.5 by default; s = 0 is the authors' raw rate, which a 0/8 visit
  turns into p = 1e-6, log p = −13.8, and the program then spends on it at any cost: at the
  family task's pass rates that allocation loses to uniform on VIP's own objective at the
  true p, scripts/bench/bench_allocation.py),
  so a prompt never seen is predicted from the prompts near it. The distance (`distance`,
  the setting `features`): 'text' (default, the authors' kind: theirs is the Euclidean
  distance between the question's embeddings by a MiniLM-L6 sentence encoder) is the
  Euclidean distance between unit-length hashed bags of the question's words and character
  trigrams, 0 for the same prompt; 'labels' reads the task's labels instead, which the authors' prompts
  do not carry: on the family task 0.1 within a family (other operands), 0.6 within a tier,
  1 across tiers; elsewhere 0.2 + 0.2·|level difference|.
- allocation: integers N_i in [n_min, n_max] (the authors' floor 4 and cap 32) minimising
  Σ_i v(N_i; a_i) + γ·log(p_i)·N_i with a_i = p_i(1-p_i), v = a/(n-1) (estimator 'rloo',
  γ = gamma) or a(n-1)/n² ('drgrpo'), under Σ N_i = budget_per_prompt·B
  (allocation.vip_allocation, exact in integers). The γ term sends spare samples to prompts
  predicted hard; a prompt predicted solved gets the floor.
One engine call, every sample trained on (settings: adaptive.vip.*). docs/theory.md, "The
field's allocation methods as their authors run them", says what differs from the authors'
code.

State: knapsack.py's `state["last_visit"]` (checkpointed as `last_visit`) and
`state["vip_questions"]`, the question text of the latest max_observed prompts observed
(checkpointed as `vip_questions`): exact resume.
"""
import functools
import zlib

import numpy as np

from ada_jax import allocation
from ada_jax.policies import knapsack, rollout
from ada_jax.policies.settings import Setting
from ada_jax.tasks import families

LABEL = "VIP"  # the display name (plots, tables)
PRESETS = {"vip": "algo=vip|"}
SETTINGS = {
    "budget_per_prompt": Setting(8, "VIP: mean samples per prompt", "batch_budget / B",
                                 "positive_int"),
    "n_min": Setting(4, "VIP: a prompt's budget at least (the authors' floor 4; >= 2 rloo, "
                     ">= 3 drgrpo)", "lower / min_keep", "positive_int"),
    "n_max": Setting(32, "VIP: a prompt's budget at most (the kept group size)", "upper",
                     "positive_int"),
    "estimator": Setting("rloo", "VIP variance model: rloo s²/(n-1) or drgrpo s²(n-1)/n²",
                         "allocation_rule", "choice:rloo/drgrpo"),
    "gamma": Setting(0.0007, "VIP: weight of the γ·log(p)·n term sending spare samples to "
                     "prompts predicted hard (authors: 0.0007 rloo, 0.0004 grpo)", "gamma",
                     "non_negative"),
    "length_scale": Setting(0.4, "VIP: RBF length scale of the Gaussian process over prompt "
                            "distances (logit space)", "length_scale", "positive"),
    "prior_logit": Setting(-1.0, "VIP: the Gaussian process's prior mean (logit of the pass "
                           "rate)", "prior_value", "any"),
    "max_observed": Setting(512, "VIP: the latest observed prompts the Gaussian process "
                            "conditions on", "—", "positive_int"),
    "features": Setting("text", "VIP: what the distance between prompts reads: text = hashed "
                        "words and character trigrams of the question (the authors' kind, an "
                        "embedding of the prompt), labels = the task's family / tier or level "
                        "labels", "— (embedding_model)", "choice:text/labels"),
    "smoothing": Setting(0.5, "VIP: a last visit of k in n observed as (k+s)/(n+2s); 0 = the "
                         "authors' raw rate (a 0/8 visit predicts p = 1e-6)", "—",
                         "non_negative"),
}


def check(config) -> None:
    """n_min <= budget_per_prompt <= n_max; n_min where the variance model is convex
    (allocation.VIP_MIN_BUDGET); a finite prior."""
    v = config.adaptive.vip
    lo, mean, hi = v.n_min, v.budget_per_prompt, v.n_max
    if not lo <= mean <= hi:
        raise ValueError(f"config.adaptive.vip.n_min={lo}, vip.budget_per_prompt={mean}, "
                         f"vip.n_max={hi}: need n_min <= budget_per_prompt <= n_max (the "
                         f"budgets sum to budget_per_prompt x the batch)")
    least = allocation.VIP_MIN_BUDGET[v.estimator]
    if v.n_min < least:
        raise ValueError(f"config.adaptive.vip.n_min={v.n_min}: must be >= {least} for "
                         f"vip.estimator={v.estimator!r} (its variance s²/(n-1) or "
                         f"s²(n-1)/n² is not convex below)")
    if isinstance(v.prior_logit, bool) or not isinstance(v.prior_logit, (int, float)) \
            or not np.isfinite(v.prior_logit):
        raise ValueError(f"config.adaptive.vip.prior_logit={v.prior_logit!r}: must be a "
                         f"finite number")


def group_size(config) -> tuple[int, int]:
    """(G, training rows per prompt): every sample trained, at most n_max a prompt."""
    v = config.adaptive.vip
    return v.n_max, v.budget_per_prompt


def init_state(ctx, params) -> dict:
    return {"vip_questions": {}}


def checkpoint(state) -> dict:
    return {"vip_questions": state["vip_questions"]}


def restore(meta) -> dict:
    return {"vip_questions": dict(meta.get("vip_questions", {}))}


def collect(ctx, params, iterator, key, state) -> rollout.Collected:
    texts = state["vip_questions"]

    def budgets(config, problems, visits):  # problems: the whole batch, alike everywhere
        n = budgets_for(config, problems, visits, texts)
        texts.update({str(p.id): p.question for p in problems})
        return n
    got, _ = knapsack.collect_visited(ctx, params, iterator, key, state, budgets)
    kept = set(list(state["last_visit"])[-ctx.config.adaptive.vip.max_observed:])
    for k in [k for k in texts if k not in kept]:
        del texts[k]
    return got


EMBED_DIM = 1024  # hashed features of a question (collisions rare at a few hundred n-grams)


@functools.lru_cache(maxsize=8192)
def embed(text: str) -> np.ndarray:
    """[EMBED_DIM] unit-length hashed counts of the text's words and of each word's character
    trigrams (with boundary marks): texts sharing words and word parts are near."""
    x = np.zeros(EMBED_DIM)
    for w in text.split():
        b = f"<{w}>"
        for g in [w] + [b[i:i + 3] for i in range(len(b) - 2)]:
            x[zlib.crc32(g.encode("utf-8", "surrogatepass")) % EMBED_DIM] += 1.0
    return x / max(np.linalg.norm(x), 1e-12)


def _text_distance(texts_a, texts_b) -> np.ndarray:
    X = np.stack([embed(t) for t in texts_a]) if texts_a else np.zeros((0, EMBED_DIM))
    Y = np.stack([embed(t) for t in texts_b]) if texts_b else np.zeros((0, EMBED_DIM))
    return np.sqrt(np.maximum(2.0 - 2.0 * X @ Y.T, 0.0))


def _labels_distance(config, la, lb) -> np.ndarray:
    la, lb = np.asarray(la)[:, None], np.asarray(lb)[None, :]
    if config.task.name == "families":
        tier = np.vectorize(families.tier_of, otypes=[object])
        return np.where(la == lb, 0.1, np.where(tier(la) == tier(lb), 0.6, 1.0))
    return 0.2 + 0.2 * np.abs(la - lb).astype(np.float64)


def distance(config, a, b) -> np.ndarray:
    """[A, B] distance between prompts a and b, each (ids, levels, question texts), by
    adaptive.vip.features; 0 for the same prompt."""
    if config.adaptive.vip.features == "text":
        d = _text_distance(list(a[2]), list(b[2]))
    else:
        d = _labels_distance(config, a[1], b[1])
    return np.where(np.asarray(a[0])[:, None] == np.asarray(b[0])[None, :], 0.0, d)


def predict(config, problems, visits, texts=None) -> np.ndarray:
    """[B] predicted pass rates: the GP's posterior mean over the last max_observed prompts
    observed. `texts`: id -> question of the observed prompts (one without reads as a text
    of its own, near no other)."""
    a = config.adaptive.vip
    texts = texts or {}
    obs = list(visits.items())[-a.max_observed:]
    seen = ([k for k, _ in obs], [v[2] for _, v in obs],
            [texts.get(k, f"\x00{k}") for k, _ in obs])
    sm = a.smoothing  # 0: the authors' raw rate (clipped to [1e-6, 1 - 1e-6])
    p_o = np.asarray([(v[1] + sm) / (v[0] + 2 * sm) if v[0] + sm > 0 else 0.0
                      for _, v in obs], np.float64)
    query = ([str(p.id) for p in problems], [p.level for p in problems],
             [p.question for p in problems])

    def kern(d):
        return np.exp(-0.5 * (d / a.length_scale) ** 2)
    K_oo = kern(distance(config, seen, seen)) if obs else np.zeros((0, 0))
    K_qo = kern(distance(config, query, seen)) if obs else np.zeros((len(problems), 0))
    f = allocation.gp_logit_mean(K_oo, K_qo, p_o, a.prior_logit)
    return 1.0 / (1.0 + np.exp(-f))


def budgets_for(config, problems, visits, texts=None) -> np.ndarray:
    v = config.adaptive.vip
    p = np.clip(predict(config, problems, visits, texts), 1e-6, 1 - 1e-6)
    return allocation.vip_allocation(p * (1 - p), v.budget_per_prompt * len(problems),
                                     v.n_min, v.n_max, v.estimator,
                                     linear=allocation.vip_gamma_term(p, v.gamma))
