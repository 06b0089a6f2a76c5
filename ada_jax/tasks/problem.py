"""The one problem record shared by every task, loader, template and verifier."""
import dataclasses
import hashlib

EVAL_BUCKETS = 8  # a question belongs to the eval split iff its id % EVAL_BUCKETS < held_out


@dataclasses.dataclass(frozen=True)
class Problem:
    """One prompt. `answer` is the gold final answer (what goes inside \\boxed{});
    `solution` a worked solution (for SFT and hints; may be ""); `level` 1..8 for the
    embedded task, the file's level column if any, else 0."""
    id: int
    question: str
    answer: str
    solution: str = ""
    level: int = 0


def problem_id(question: str) -> int:
    """Stable 63-bit id from the question text (same text -> same id, across runs and hosts)."""
    digest = hashlib.blake2b(question.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def split_of(question: str, held_out: int = 1) -> str:
    """'eval' or 'train', decided by the question text alone, so the splits are disjoint:
    `held_out` of the EVAL_BUCKETS id buckets are held out (1: one question in 8)."""
    return "eval" if problem_id(question) % EVAL_BUCKETS < held_out else "train"


def hint(problem: Problem, strength: int) -> str:
    """A prefix of the reference solution: strength 1/2/3 reveals about 1/4, 1/2, 3/4 of its
    steps (lines, or sentences for one-line solutions), never the line holding the answer."""
    if strength not in (1, 2, 3):
        raise ValueError(f"hint strength must be 1, 2 or 3, got {strength!r}")
    lines = [l for l in problem.solution.split("\n") if l.strip()]
    if len(lines) == 1:
        lines = [s.strip().rstrip(".") + "." for s in lines[0].split(". ") if s.strip()]
    steps = [l for l in lines if "\\boxed" not in l]
    n = min(int(len(steps) * strength / 4 + 0.5), len(steps) - 1)
    return "\n".join(steps[:max(n, 0)])
