"""Train a packaged sentencepiece tokenizer: ada_jax/assets/embedded.model (--task=embedded)
or ada_jax/assets/families.model (--task=families, the family task's).

The corpus is what the tiny model will see: the task's prompts (with and without hints) and
solutions. Digits, operators, newline, `\\boxed{` and `}` (and the family task's tags and
markers) are single pieces (user-defined symbols), so the embedded verifier can run on token
ids; pad=0 unk=1 bos=2 eos=3.

  python scripts/tools/train_tokenizer.py [--task=embedded] [--vocab_size=N] [--problems=4000]

--vocab_size defaults to the task's: 128 (embedded), 370 (families: its 336 tags and markers,
the embedded symbols and the special ids make 358 pieces).
"""
import argparse
import io
import os

import sentencepiece as spm

from ada_jax.tasks import families
from ada_jax.tasks.embedded import EmbeddedSource
from ada_jax.tasks.problem import hint
from ada_jax.tokenizer import ASSET_MODELS, EMBEDDED_MODEL, EMBEDDED_SYMBOLS, render_prompt


def corpus(task: str, n: int):
    """Prompt and solution lines of n train problems (sentencepiece trains on lines); for the
    family task, both readings' solutions."""
    if task == "families":
        for p in families.FamilySource("train", n, seed=0, family_set="every"):
            yield p.question
            for r in families.READINGS:
                yield from families.solution(p.question, r).split("\n")
        return
    for i, p in enumerate(EmbeddedSource("train", n, seed=0)):
        text = render_prompt(p.question, "embedded", hint(p, 1 + i % 3)) + p.solution
        yield from text.split("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", choices=("embedded", "families"), default="embedded")
    parser.add_argument("--vocab_size", type=int, default=None)
    parser.add_argument("--problems", type=int, default=4000)
    parser.add_argument("--out", default=None, help="default: the task's packaged model")
    args = parser.parse_args()
    asset = ASSET_MODELS.get(args.task, EMBEDDED_MODEL)
    vocab_size = args.vocab_size or {"families": 370}.get(args.task, 128)
    out = args.out or os.path.join(os.path.dirname(__file__), "..", "..", "ada_jax", "assets", asset)
    symbols = EMBEDDED_SYMBOLS + (families.SYMBOLS if args.task == "families" else ())
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=corpus(args.task, args.problems), model_writer=model,
        model_type="bpe", vocab_size=vocab_size, hard_vocab_limit=False,
        character_coverage=1.0, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        user_defined_symbols=list(symbols), split_digits=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False,
        normalization_rule_name="identity", num_threads=1, minloglevel=2)
    with open(out, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    print(f"wrote {out}: vocab {sp.get_piece_size()}")


if __name__ == "__main__":
    main()
