"""Collapse: a policy that solved some of its prompts and now solves none.

The divergence guard (optim.max_update_ratio, optim.max_skipped_steps) stops updates that
are non-finite or larger than the params. A learning rate 10-100x too high moves the params by
0.05-0.5 of their norm per step, under that guard, and wrecks the policy all the same: on the
smoke config at lr 1e-2 the reward is 0 at every step and the accuracy on the training prompts
falls 0.07 -> 0 (0.70 at its lr 1e-3). Its update ratio is high from the first step and then
falls, so it is not a spike over the run's own history; what marks it is the outcome.

`Watch` follows the success measures of each record: the step's reward (`reward_mean`) and,
when evaluated, the accuracy on training prompts (`train_eval/avg@k`; eval.train_prompts).
After any of them was positive, `optim.collapse_steps` steps in a row whose reward is 0 and
whose training-prompt accuracy, where measured, is 0 too are a collapse: a warning once (log
and the record's `collapsed` = 1, which stays 1 while the success stays 0), and with
`optim.stop_on_collapse` (the default) the run stops with `Collapsed` (exit 1), at that step
and, resumed, at every step while it stays collapsed. Held-out
accuracy is not a measure here: on a transfer task it may be 0 all along.
"""
import math


class Collapsed(RuntimeError):
    """The policy collapsed and optim.stop_on_collapse is set."""


class Watch:
    """`update(step, metrics)` on every record (step 0's eval too); its state() goes into the
    checkpoint, so a resumed run judges as an unbroken one."""

    def __init__(self, steps: int, eval_k: int):
        self.steps, self.accuracy = steps, f"train_eval/avg@{eval_k}"
        self.best = None  # [value, measure, step] of the best success seen
        self.zeros, self.since, self.warned = 0, None, False

    def state(self) -> dict:
        return {"best": self.best, "zeros": self.zeros, "since": self.since,
                "warned": self.warned}

    def restore(self, state: dict | None) -> None:
        if state:  # None: a checkpoint from before collapse detection
            self.best, self.zeros = state["best"], state["zeros"]
            self.since, self.warned = state["since"], state["warned"]

    def update(self, step: int, metrics: dict) -> bool:
        """Sets metrics["collapsed"] (1.0 while collapsed); True at the step a collapse is
        first seen (the one warning)."""
        if not self.steps:
            return False
        seen = [(metrics[k], name) for k, name in (("reward_mean", "reward"),
                                                    (self.accuracy, "training-prompt accuracy"))
                if isinstance(metrics.get(k), (int, float)) and math.isfinite(metrics[k])]
        if any(v > 0 for v, _ in seen):
            self.zeros, self.since = 0, None
            value, name = max(seen)
            if self.best is None or value > self.best[0]:
                self.best = [value, name, step]
        elif "reward_mean" in metrics:  # a training step's record (step 0 has none)
            self.zeros += 1
            self.since = step if self.since is None else self.since
        collapsed = self.best is not None and self.zeros >= self.steps
        metrics["collapsed"] = float(collapsed)
        first = collapsed and not self.warned
        self.warned |= collapsed
        return first

    def describe(self, step: int, metrics: dict) -> str:
        value, name, at = self.best
        return (f"step {step}: the policy collapsed: reward 0 (and training-prompt accuracy 0 "
                f"where evaluated) at every step since step {self.since}, after a {name} of "
                f"{value:.3g} at step {at} (update_ratio now "
                f"{metrics.get('update_ratio', float('nan')):.3g})")
