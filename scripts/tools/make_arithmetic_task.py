"""Arithmetic questions of graded difficulty as a `task=files` task (gsm8k layout: question,
answer, level), the held-out split by question: no eval question is a training question.

Levels: 1 one-digit a + b; 2 two-digit ± one-digit; 3 two-digit ± two-digit; 4 products
a × b with 2 <= a, b <= 12; 5 three-digit ± two-digit; 6 three-digit ± three-digit (`--levels`:
1-4 by default). Differences are never negative. shots.txt holds solved questions
of neither split (`--shots_per_level` of each level that has questions left over) in the plain
template's form, for a base model (`--config.task.few_shot_file=/tmp/arith/shots.txt`).

  python scripts/tools/make_arithmetic_task.py --out_dir=/tmp/arith --train_per_level=200 \\
      --eval_per_level=32
  python scripts/train.py --config=configs/base.py:model=hf,task=files \\
      --config.task.files=/tmp/arith/train.jsonl --config.task.eval_files=/tmp/arith/eval.jsonl
"""
import json
import os

import numpy as np
from absl import app, flags

from ada_jax.tokenizer import few_shot_text

flags.DEFINE_string("out_dir", "/tmp/arith", "where train.jsonl and eval.jsonl go")
flags.DEFINE_integer("train_per_level", 200, "training questions per level")
flags.DEFINE_integer("eval_per_level", 32, "held-out questions per level")
flags.DEFINE_integer("shots_per_level", 1, "solved questions per level in shots.txt")
flags.DEFINE_list("levels", ["1", "2", "3", "4"], "levels to write, of 1..6")
flags.DEFINE_integer("seed", 0, "generator seed")
flags.DEFINE_string("suffix", " Answer with the number only.",
                    "text after each question (the instruction the model follows)")

LEVELS = (1, 2, 3, 4, 5, 6)


def all_questions(level: int) -> list[tuple[str, int]]:
    """Every (question, answer) of a level, in a fixed order."""
    out = []
    if level == 1:
        out = [(f"{a} + {b}", a + b) for a in range(10) for b in range(10)]
    elif level in (2, 3, 5, 6):
        big = range(10, 100) if level in (2, 3) else range(100, 1000)
        small = {2: range(10), 3: range(10, 100), 5: range(10, 100), 6: range(100, 1000)}[level]
        for a in big:
            for b in small:
                out.append((f"{a} + {b}", a + b))
                if a >= b:
                    out.append((f"{a} - {b}", a - b))
    elif level == 4:
        out = [(f"{a} × {b}", a * b) for a in range(2, 13) for b in range(2, 13)]
    return out


def split(level: int, n_train: int, n_eval: int, n_shots: int, rng
          ) -> tuple[list, list, list]:
    """Disjoint train / eval / shot draws of one level (fewer when the level has fewer
    questions)."""
    qs = all_questions(level)
    order = rng.permutation(len(qs))
    n_eval = min(n_eval, len(qs) // 4)
    ev = [qs[i] for i in order[:n_eval]]
    tr = [qs[i] for i in order[n_eval:n_eval + n_train]]
    shots = [qs[i] for i in order[n_eval + n_train:n_eval + n_train + n_shots]]
    return tr, ev, shots


def rows(pairs, level: int, suffix: str) -> list[dict]:
    return [dict(question=f"What is {q}?{suffix}", answer=str(a), level=level) for q, a in pairs]


def main(_):
    f = flags.FLAGS
    rng = np.random.default_rng(f.seed)
    levels = [int(x) for x in f.levels]
    if not levels or set(levels) - set(LEVELS):
        raise app.UsageError(f"--levels={','.join(f.levels)}: choose from {LEVELS}")
    train, held, shots = [], [], []
    for level in levels:
        tr, ev, sh = split(level, f.train_per_level, f.eval_per_level, f.shots_per_level, rng)
        train += rows(tr, level, f.suffix)
        held.append(rows(ev, level, f.suffix))
        shots += rows(sh, level, f.suffix)
    # Levels interleaved, so that the first eval.prompts rows hold every level alike.
    held = [r for i in range(max(map(len, held))) for lv in held for r in lv[i:i + 1]]
    assert not {r["question"] for r in train} & {r["question"] for r in held}
    assert not {r["question"] for r in shots} & {r["question"] for r in train + held}
    os.makedirs(f.out_dir, exist_ok=True)
    for name, data in (("train", train), ("eval", held)):
        with open(os.path.join(f.out_dir, f"{name}.jsonl"), "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in data)
    with open(os.path.join(f.out_dir, "shots.txt"), "w") as fh:
        fh.write(few_shot_text((r["question"], r["answer"]) for r in shots))
    print(json.dumps(dict(train=len(train), eval=len(held), shots=len(shots),
                          out_dir=f.out_dir)))


if __name__ == "__main__":
    app.run(main)
