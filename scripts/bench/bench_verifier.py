"""Throughput of the math verifier pool: completions scored per second.

Completions are synthetic chain-of-thought texts (a few hundred characters) ending in a boxed
answer that is the gold answer in another form (\\frac{2}{4} for \\frac{1}{2}), or a wrong one,
over integers, fractions, radicals, multiples of pi, intervals and polynomials; numbers are
random so math-verify's caches do not help. The last output line is one JSON object.

  python scripts/bench/bench_verifier.py [--quick] [--workers=2] [--timeout_s=5]
"""
import argparse
import json
import random
import resource
import time

from ada_jax.rewards.math_verifier import MathVerifierPool


def answer_pair(rng: random.Random) -> tuple[str, str, bool]:
    """(gold, predicted, whether they are equivalent)."""
    a, b, k = rng.randrange(1, 200), rng.randrange(2, 60), rng.randrange(2, 6)
    kind = rng.randrange(6)
    if kind == 0:
        gold, good, bad = str(a), f"{a}.0", str(a + 1)
    elif kind == 1:
        gold, good, bad = f"\\frac{{{a}}}{{{b}}}", f"\\frac{{{k * a}}}{{{k * b}}}", \
            f"\\frac{{{a + 1}}}{{{b}}}"
    elif kind == 2:
        gold, good, bad = f"{k}\\sqrt{{{b}}}", f"\\sqrt{{{k * k * b}}}", f"{k + 1}\\sqrt{{{b}}}"
    elif kind == 3:
        gold, good, bad = f"{a}\\pi", f"\\pi \\cdot {a}", f"{a + 1}\\pi"
    elif kind == 4:
        gold, good, bad = f"(-{a}, {b}]", f"(-{a},{b}]", f"[-{a}, {b}]"
    else:
        gold, good, bad = f"x^2 + {a}x + {b}", f"{b} + {a}x + x^2", f"x^2 + {a}x + {b + 1}"
    ok = rng.random() < 0.5
    return gold, good if ok else bad, ok


def completion(rng: random.Random, pred: str) -> str:
    steps = [f"Step {i + 1}: we have ${rng.randrange(100)} + {rng.randrange(100)} = "
             f"{rng.randrange(200)}$, so the quantity simplifies." for i in range(rng.randrange(3, 8))]
    return " ".join(steps) + f" Therefore the final answer is $\\boxed{{{pred}}}$."


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="about one minute")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout_s", type=float, default=5.0)
    args = parser.parse_args()
    rng = random.Random(0)
    n = 1500 if args.quick else 6000
    cases = [answer_pair(rng) for _ in range(n)]
    texts = [completion(rng, pred) for _, pred, _ in cases]
    golds = [gold for gold, _, _ in cases]
    with MathVerifierPool(num_workers=args.workers, timeout_s=args.timeout_s) as pool:
        pool.score(texts[:20], golds[:20])  # start-up and warm-up, not timed
        t = time.perf_counter()
        scores = pool.score(texts, golds)
        seconds = time.perf_counter() - t
        timeouts, crashes = pool.n_timeouts, pool.n_crashes
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Workers' CPU time (collected when they exit) tells what a loaded machine hides: the rate
    # with one free core per worker. It includes their start-up and the 20 warm-up samples.
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_ms = 1000 * (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / (n + 20)
    agree = sum(float(ok) == s for (_, _, ok), s in zip(cases, scores)) / n
    result = {f"completions_per_s_{args.workers}_workers": round(n / seconds, 1),
              "completions": n, "seconds": round(seconds, 2), "timeouts": timeouts,
              "crashes": crashes, "agreement_with_construction": round(agree, 4),
              "worker_cpu_ms_per_completion": round(cpu_ms, 2),
              f"completions_per_s_{args.workers}_free_cores": round(
                  1000 * args.workers / cpu_ms, 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
