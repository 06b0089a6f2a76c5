"""The Task interface: what a task provides beyond its problems.

A task's problems come from `tasks.load_split(config, split)`. Everything else that is
particular to a task lives behind one `Task` record, which the generic code (the config, the
rollout's reward, the trainer's and the evaluator's metrics) reads through `tasks.task_of`
instead of naming a task:

  configure      its own config defaults, applied by `configs/base.py:get_config` after the
                 model's and the smoke run's (`configure(config, smoke, pretrained)`)
  host_verifier  whether its reward is the math verifier on the host (decoded text) rather
                 than the engine's jittable boxed-answer check on token ids
  reward_data    per-prompt arrays its engine reward needs beyond the answer's ids
                 (`reward_data(config, tokenizer, problems) -> dict`)
  reward_gate    a jittable factor on the boxed-answer score, reading those arrays
                 (`reward_gate(config)` -> `gate(data, idx_S, tokens_SN, lengths_S)` or None)
  score_text     the host scorer for evaluation (`score_text(config)` -> `fn(problem, text)`
                 or None: the boxed answer)
  train_metrics  metrics of the step's kept completions (`train_metrics(texts) -> dict`)
  eval_metrics   metrics of an evaluation (`eval_metrics(problems, rewards_PK, texts)`)
  base_pass_rate the base policy's pass rate of a problem where the task knows it
                 (`base_pass_rate(problem) -> float`): each step then counts the samples a
                 method spends on prompts with base p <= 0.1 and >= 0.9 (`collect.collect`)

Each field is optional; None means the task adds nothing there.
"""
import dataclasses
from typing import Callable, Optional


@dataclasses.dataclass(frozen=True)
class Task:
    """One task's hooks (see the module docstring); `name` is config.task.name."""
    name: str
    configure: Optional[Callable] = None
    host_verifier: bool = False
    reward_data: Optional[Callable] = None
    reward_gate: Optional[Callable] = None
    score_text: Optional[Callable] = None
    train_metrics: Optional[Callable] = None
    eval_metrics: Optional[Callable] = None
    base_pass_rate: Optional[Callable] = None
