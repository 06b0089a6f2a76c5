"""Collapse: a policy whose success rate fell to near zero from what it had earlier in the run.

The divergence guard (optim.max_update_ratio, optim.max_skipped_steps) stops updates that
are non-finite or larger than the params. A learning rate 10-100x too high moves the params by
0.03-0.5 of their norm per step, under that guard, and wrecks the policy all the same: on the
smoke config at lr 1e-2 the training-prompt accuracy falls 0.066 -> 0.02 -> 0 and the reward
stays near 0 (0.70 at its lr 1e-3). What marks it is the outcome.

`Watch` counts two measures, each compared only with its own earlier values: the rollouts'
prompts and those with a right sample (every training step; step 1's rollouts are the run's
own, at its batch size: prompts, not samples, because a step's prompts are new ones and a
prompt's samples succeed or fail together, so 6 right samples of 32 may be 3 prompts of 8) and,
when evaluated, the accuracy on the training prompts (`train_eval/avg@k` samples;
eval.train_prompts; step 0 included: the same prompts, k and temperature each time). The
window is the last `optim.collapse_steps` steps; a measure *fell* (`fell`) when its rate in
the window is under NEAR_ZERO of its rate before the window and Fisher's exact test finds a
count that low improbable (chance under ALPHA) were the rate unchanged: both rates are
estimates, so a lucky first step (the earlier rate from 8 prompts) is no evidence, a step of 2
samples weighs as 2, and one lucky positive does not clear a window of hundreds. A collapse
(`collapsed`): a measure fell and none held (a rate in the window above
NEAR_ZERO of its earlier one). Then a warning once (log and the record's `collapsed` = 1,
which stays 1 while collapsed), and with `optim.stop_on_collapse` (the default) the run stops
with `Collapsed` (exit 1), at that step and, resumed, at every step while it stays collapsed.
Held-out accuracy is not a measure here: on a transfer task it may be 0 all along.
"""
import math

ALPHA = 1e-4  # a false stop's chance per judged window, were the rate unchanged
NEAR_ZERO = 0.25  # the window's rate must also be under this share of the earlier rate
LARGE_UPDATE = 0.01  # an update ratio (update norm / param norm) this large blames the lr
# measure -> (its name in the message, what it counts)
MEASURES = {"reward": ("rollouts", "prompts with a right sample"),
            "accuracy": ("training-prompt accuracy", "samples")}
UNIT = "prompts"  # what a checkpointed watch counted the rollouts in (older ones: samples)


class Collapsed(RuntimeError):
    """The policy collapsed and optim.stop_on_collapse is set."""


def fisher_less(before: tuple, window: tuple) -> float:
    """Fisher's exact test, one-sided: P[the window holds k or fewer of the k0 + k positives]
    for (n0, k0) before and (n, k) in it, were both drawn at one rate (hypergeometric)."""
    from scipy import stats
    (n0, k0), (n, k) = before, window
    return float(stats.hypergeom.cdf(k, n0 + n, k0 + k, n))


def fell(before: tuple, window: tuple) -> float | None:
    """For (count, positives) before and in the window: the chance of the window's count or
    fewer were the rate unchanged (`fisher_less`), when the window's rate is under NEAR_ZERO of
    the earlier one; None when it is not (or either is empty, or nothing was solved before)."""
    (n0, k0), (n, k) = before, window
    if not (n0 and k0 and n) or k / n >= NEAR_ZERO * k0 / n0:
        return None
    return fisher_less(before, window)


def collapsed(before: dict, window: dict) -> bool:
    """The decision, on {measure: (samples, positives)} before and in the window. A measure is
    judged when it solved something before and has samples in the window; a collapse: every
    judged measure fell (none held at NEAR_ZERO of its earlier rate) and one improbably
    (chance under ALPHA)."""
    judged = [fell(before[m], w) for m, w in window.items()
              if w[0] and m in before and before[m][0] and before[m][1]]
    return bool(judged) and None not in judged and min(judged) < ALPHA


class Watch:
    """`update(step, metrics, reward)` on every record (step 0's eval too); its state() goes
    into the checkpoint, so a resumed run judges as an unbroken one."""

    def __init__(self, steps: int, eval_k: int, train_eval_samples: int = 0):
        self.steps, self.accuracy = steps, f"train_eval/avg@{eval_k}"
        self.eval_samples = train_eval_samples  # eval.train_prompts x k
        self.before = {m: [0, 0] for m in MEASURES}  # samples, positives before the window
        self.window = []  # [step, measure, samples, positives, update_ratio] of the window
        self.warned = False

    def state(self) -> dict:
        return {"before": self.before, "window": self.window, "warned": self.warned,
                "unit": UNIT}

    def restore(self, state: dict | None) -> None:
        # else a checkpoint from before this rule (or rollouts counted in samples): start over
        if state and "window" in state and state.get("unit") == UNIT:
            self.before, self.window = state["before"], state["window"]
            self.warned = state["warned"]

    def update(self, step: int, metrics: dict, reward: tuple | None = None) -> bool:
        """`reward`: the step's rollouts (prompts, prompts with a right sample), None at step
        0. Sets
        metrics["collapsed"] (1.0 while collapsed); True at the step a collapse is first seen
        (the one warning)."""
        if not self.steps:
            return False
        ratio = float(metrics.get("update_ratio", 0.0))
        ratio = ratio if math.isfinite(ratio) else 0.0  # a skipped update's NaN
        if reward is not None:
            self.window.append([step, "reward", int(reward[0]), int(reward[1]), ratio])
        acc = metrics.get(self.accuracy)
        if self.eval_samples and isinstance(acc, (int, float)) and math.isfinite(acc):
            self.window.append([step, "accuracy", self.eval_samples,
                                round(acc * self.eval_samples), ratio])
        while self.window and self.window[0][0] <= step - self.steps:
            _, m, n, k, _ = self.window.pop(0)
            self.before[m] = [self.before[m][0] + n, self.before[m][1] + k]
        now = collapsed({m: tuple(v) for m, v in self.before.items()}, self._counts())
        metrics["collapsed"] = float(now)
        first = now and not self.warned
        self.warned |= now
        return first

    def _counts(self) -> dict:
        out = {}
        for _, m, n, k, _ in self.window:
            out[m] = (out.get(m, (0, 0))[0] + n, out.get(m, (0, 0))[1] + k)
        return out

    def message(self, step: int, optim) -> str:
        """One line: what collapsed, how to keep the run, and the learning rate when the
        window's updates were large (LARGE_UPDATE)."""
        counts, parts = self._counts(), []
        for m, (n, k) in counts.items():
            n0, k0 = self.before[m]
            if (p := fell((n0, k0), (n, k))) is not None:
                name, unit = MEASURES[m]
                parts.append(f"{name} {k}/{n} {unit} ({k / n:.3g}) against {k0}/{n0} "
                             f"({k0 / n0:.3g}) before, a chance of {p:.1g} had the rate not "
                             f"changed")
        keep = (f"to keep training this run, resume it with "
                f"--config.optim.stop_on_collapse=False (a warning only) or judge a longer "
                f"window with --config.optim.collapse_steps (now {self.steps})"
                if optim.stop_on_collapse else "it trains on (optim.stop_on_collapse=False)")
        top = max((r for *_, r in self.window), default=0.0)
        lr = (f". The updates were large (update ratio up to {top:.2g} of the params' norm per "
              f"step): the learning rate is the likely cause; to start again, lower optim.lr "
              f"({optim.lr:g}) in a new --workdir (this one's checkpoints hold the collapsed "
              f"policy)" if top >= LARGE_UPDATE else "")
        return (f"step {step}: the policy collapsed; {keep}. Steps {step - self.steps + 1}-"
                f"{step}: " + "; ".join(parts) + lr)
