"""The Task interface (ada_jax/tasks/task.py): the generic code reaches a task's config, reward
and metrics through `tasks.task_of`, never by importing a task module by name."""
import ast
import os

import numpy as np
import pytest

from ada_jax import tasks
from ada_jax.tasks import embedded, families
from configs.base import get_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERIC = ("ada_jax/policies/rollout.py", "ada_jax/train.py", "ada_jax/evaluate.py",
           "ada_jax/collect.py")
TASK_MODULES = {"families", "embedded", "files", "tfds_builders"}


@pytest.mark.parametrize("path", GENERIC)
def test_generic_code_imports_no_task_module(path):
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ada_jax.tasks"):
            named |= {node.module.rsplit(".", 1)[-1]} | {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            named |= {a.name.rsplit(".", 1)[-1] for a in node.names
                      if a.name.startswith("ada_jax.tasks")}
    assert not named & (TASK_MODULES | {"is_embedded"}), named
    # nor does it branch on a task's name
    src = ast.unparse(tree)
    assert "task.name ==" not in src and "'families'" not in src, path


def test_every_task_has_its_record():
    for name in tasks.TASKS:
        assert tasks.task_of(name).name == name
        assert tasks.task_of(get_config(f"task={name}")).name == name
    with pytest.raises(ValueError, match="choose from"):
        tasks.task_of("nope")
    assert tasks.task_of("files").host_verifier and tasks.task_of("tfds_files").host_verifier
    assert not tasks.task_of("families").host_verifier


def test_embedded_train_metrics_is_the_careful_share():
    texts = ["4+3=7\n\\boxed{7}", "\\boxed{7}", "\\boxed{7}\n4+3=7", "4+3=7\n"]
    assert embedded.train_metrics(texts) == {"careful_share": 0.5}
    assert embedded.train_metrics([]) == {"careful_share": 0.0}
    assert tasks.task_of("families").train_metrics is None


def test_family_reward_gate_reads_the_right_marker():
    """The gate is 1 exactly where the first token is the prompt's right marker (and the
    response is not empty), only under task.reward=reading."""
    c = get_config("task=families")
    data = {"marker_id": np.asarray([5, 9], np.int32)}
    idx_S = np.asarray([0, 0, 1, 1, 1])
    tokens_SN = np.asarray([[5, 1], [9, 1], [9, 2], [5, 2], [9, 0]], np.int32)
    lengths_S = np.asarray([2, 2, 2, 2, 0])
    gate = families.reward_gate(c)
    np.testing.assert_array_equal(gate(data, idx_S, tokens_SN, lengths_S),
                                  [True, False, True, False, False])
    c.unlock()
    c.task.reward = "verifier"
    assert families.reward_gate(c) is None and families.reward_data(c, None, []) == {}
    assert families.host_scorer(c) is None


def test_family_config_comes_from_the_task():
    """get_config applies the family task's own defaults on the embedded models only."""
    c = get_config("task=families")
    assert (c.model.tokenizer, c.task.reward, c.sft.steps, c.optim.lr) == (
        "families", "reading", 7200, 3e-4)
    smoke = get_config("task=families,smoke=True")
    assert (smoke.sft.steps, smoke.rl.steps, smoke.task.min_level, smoke.task.max_level,
            smoke.eval.prompts) == (160, 6, 25, 32, 8)
    emb = get_config("task=embedded")
    assert (emb.model.tokenizer, emb.task.reward) == ("", "verifier")
    big = get_config("task=families,model=qwen2_5_0_5b")
    assert big.model.tokenizer == "" and big.task.reward == "verifier"
