"""A run's metrics record: metrics.jsonl (strict JSON, one line a step, checked and repaired
against the checkpoint on resume), TensorBoard (`tb/`) and, when asked, Weights & Biases."""
import functools
import json
import logging
import math
import os
import sys

import jax
import numpy as np

log = logging.getLogger(__name__)


@functools.cache
def tensorboardx():
    """The tensorboardX package (imported once), without torch when torch is not loaded yet:
    tensorboardX imports torch, where it is installed, only to take its tensors (ours are
    numpy), and torch keeps 0.2 GiB resident, a twentieth of a CPU host's run of a 135M model
    (docs/benchmarks.md, "Memory")."""
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # `import torch` raises ImportError, which it catches
    try:
        import tensorboardX
        import tensorboardX.proto.summary_pb2  # noqa: F401
        import tensorboardX.summary  # noqa: F401
        return tensorboardX
    finally:
        if hide and sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


class MetricsWriter:
    """metrics.jsonl, TensorBoard (`tb/`) and, with config.log.wandb, Weights & Biases.
    Every number of a record goes to all three under its metrics.jsonl key (`eval/avg@4` stays
    `eval/avg@4`: the summaries are written as protos, not through tensorboardX's add_scalar,
    which renames it `eval/avg_4`); TensorBoard also gets the step's histograms (tags
    `hist/…`) and the eval sample completions (text, `eval/samples/text_summary`).
    On resume the JSONL keeps the records of steps up to the resumed one (none on a fresh
    start, not even step 0's eval: it is redone), rewritten atomically, so a resumed run's
    file equals a continuous one's. Every step up to the resumed
    one must have a readable record: a missing or garbled one would silently lose that step's
    metrics, so it is an error, unless config.checkpoint.resume_without_metrics accepts the
    loss (a lost or emptied file; the cumulative counts come from the checkpoint).
    On several processes only process 0 reads and writes (the metrics it is given are the
    whole batch's, the same on every process); the others' writer does nothing."""

    def __init__(self, workdir: str, resume_step: int, config=None):
        self.path = os.path.join(workdir, "metrics.jsonl")
        self.tb, self.wandb, self.last = None, None, {}
        self.active = jax.process_index() == 0
        if not self.active:
            return
        kept, bad = {}, []  # step -> line; unreadable line numbers
        if resume_step and os.path.exists(self.path):
            lines, bad = read_lines(self.path)
            for line, rec in lines:
                if rec["step"] <= resume_step:
                    kept[rec["step"]] = line
        missing = sorted(set(range(1, resume_step + 1)) - kept.keys())
        lost = (f"{self.path}: no readable record of step(s) {_spans(missing)} before the "
                f"resumed checkpoint (step {resume_step})"
                + (f"; unreadable lines {_spans(bad)}" if bad else ""))
        if missing and config is not None and config.checkpoint.resume_without_metrics:
            log.warning("%s. Resuming without them (checkpoint.resume_without_metrics): their "
                        "metrics are lost; the cumulative counts (cum_*, cost_*) go on from "
                        "the checkpoint", lost)
        elif missing:
            raise ValueError(
                f"{lost}. Repair or restore the file, start a new workdir, or resume without "
                f"them with --config.checkpoint.resume_without_metrics=True (their metrics are "
                f"lost; the cumulative counts go on from the checkpoint).")
        elif bad:
            warn_unreadable(self.path, bad, f"dropped (steps after {resume_step}, redone)")
        self.last = json.loads(kept[resume_step]) if resume_step in kept else {}
        _write_atomic(self.path, "".join(kept[k] for k in sorted(kept)))
        if config is not None and config.log.wandb:
            self.wandb = _start_wandb(config, workdir)
        try:
            self.tb = tensorboardx().FileWriter(os.path.join(workdir, "tb"))
        except ImportError:  # pragma: no cover
            log.warning("tensorboardX missing: TensorBoard logging off")

    def write(self, step: int, metrics: dict, histograms: dict | None = None):
        """`metrics` without its lists to metrics.jsonl, its finite numbers to TensorBoard and
        W&B; `histograms` (name -> values) and the `…/samples` lists (run_evals) to
        TensorBoard."""
        if not self.active:
            return
        rec = {"step": step, **{k: v for k, v in metrics.items() if not isinstance(v, list)}}
        line = json.dumps(strict_json(rec), sort_keys=True, allow_nan=False)
        with open(self.path, "a") as f:
            f.write(line + "\n")
        scalars = {k: float(v) for k, v in rec.items()
                   if k != "step" and isinstance(v, (int, float)) and np.isfinite(v)}
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)
        if self.tb is None:
            return
        tbx = tensorboardx()
        summary, Summary = tbx.summary, tbx.proto.summary_pb2.Summary
        self.tb.add_summary(Summary(value=[Summary.Value(tag=k, simple_value=v)
                                           for k, v in scalars.items()]), step)
        for k, v in (histograms or {}).items():
            if len(v):
                self.tb.add_summary(summary.histogram(f"hist/{k}", np.asarray(v, float),
                                                      "auto"), step)
        for k, v in metrics.items():
            if k.endswith("/samples") and v:
                self.tb.add_summary(summary.text(k, samples_markdown(v)), step)
        self.tb.flush()

    def close(self):
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def read_lines(path: str) -> tuple[list, list]:
    """metrics.jsonl's readable lines as (line with its newline, record), and the numbers of
    the unreadable ones (cut by a crash, not UTF-8, not a record with a step)."""
    lines, bad = [], []
    with open(path, "rb") as f:  # bytes: a garbled line is one bad line, not the whole file
        for i, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = raw.decode()
                rec = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                rec = None
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                bad.append(i)
                continue
            lines.append((line if line.endswith("\n") else line + "\n", rec))
    return lines, bad


def warn_unreadable(path: str, bad: list, what: str) -> None:
    """Log the unreadable lines of `path` (read_lines), if any, and what becomes of them."""
    if bad:
        log.warning("%s: unreadable line(s) %s %s", path, _spans(bad), what)


def _spans(numbers: list) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    out = []
    for n in numbers:
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in out)


def strict_json(rec: dict) -> dict:
    """`rec` with each non-finite number (a skipped step's NaN loss) as null, and their keys
    under `nonfinite`: JSON has no NaN or Infinity (json.dumps writes bare NaN, which strict
    readers such as jq or JavaScript refuse)."""
    bad = sorted(k for k, v in rec.items() if isinstance(v, float) and not math.isfinite(v))
    return rec if not bad else {**rec, **dict.fromkeys(bad), "nonfinite": bad}


def _wandb():
    """The wandb module, imported only when config.log.wandb asks for it (it is not a
    requirement of the package)."""
    try:
        import wandb
    except ImportError:
        raise ImportError("config.log.wandb=True needs the wandb package: pip install wandb "
                          "(or leave log.wandb False; TensorBoard logs to <workdir>/tb "
                          "either way)") from None
    return wandb


def _start_wandb(config, workdir: str):
    """A W&B run named after the workdir, with the config."""
    return _wandb().init(project=config.log.wandb_project, dir=workdir,
                      name=os.path.basename(os.path.normpath(workdir)),
                      config=json.loads(config.to_json_best_effort()))


def samples_markdown(samples: list[dict]) -> str:
    """Eval completions (evaluate's `samples`) as Markdown for TensorBoard's text tab: level,
    reward and reference answer, then the question and the completion verbatim."""
    block = lambda text: "\n".join("    " + line for line in text.splitlines())  # noqa: E731
    return "\n\n".join(f"**level {s['level']}**, reward {s['reward']:g}, answer "
                       f"`{s['answer']}`\n\nquestion:\n\n{block(s['question'])}\n\n"
                       f"completion:\n\n{block(s['completion'])}" for s in samples)


def _write_atomic(path: str, text: str) -> None:
    """Write via a temporary file and os.replace: a crash leaves the old file or the new one,
    never a cut or empty one. Process 0 only: a run's logs (config.json, metrics.jsonl) are
    one set, not one per host."""
    if jax.process_index() != 0:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
