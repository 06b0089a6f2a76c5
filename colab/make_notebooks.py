"""Generate the Colab notebooks in this folder from code, so they are reviewable as code.

  python colab/make_notebooks.py          # rewrites colab/*.ipynb (no outputs)

Every notebook opens with an "Open in Colab" badge and the same setup cell. The cell finds the
repository: $ADA_JAX_ROOT, else the checkout the notebook runs in (the nearest folder at or
above the working directory holding setup.py and ada_jax/); in a fresh Colab runtime (no
checkout, `google.colab` imported) it clones REPO_URL into ./ada_jax. It pip-installs the
repository (editable, with its dependencies) when no `ada_jax` distribution is installed, and
puts the root first on sys.path, so `configs/` and a fresh install import without a restart.
ADA_JAX_NOTEBOOK_SMOKE=1 shrinks every notebook to seconds (random init, synthetic reward,
tiny dims, few Monte-Carlo draws): that is what tests/test_notebooks.py runs. Notebook code is
calls into the library and plotting only.
"""
import os
import textwrap

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))
# The repository the badges open and a fresh Colab runtime clones (a placeholder: there is no
# public copy yet). A fork changes these two lines and re-runs this script.
REPO_URL = "https://github.com/ada-jax/ada_jax"
BRANCH = "main"

SETUP = r'''
# Setup: find the repository (a fresh Colab runtime clones REPO_URL), install it once per
# runtime, put it first on sys.path. If pip replaced a package the runtime had already
# imported (pip says so), restart the session and run all again: nothing is cloned or
# installed twice. ADA_JAX_ROOT names another checkout; ADA_JAX_NOTEBOOK_SMOKE=1 runs the
# notebook in seconds (what the tests do).
REPO_URL = "<REPO_URL>"

import importlib.metadata
import os
import subprocess
import sys


def find_root(path):
    """The checkout at or above `path` (setup.py and ada_jax/ side by side), else None."""
    while not (os.path.isfile(os.path.join(path, "setup.py"))
               and os.path.isdir(os.path.join(path, "ada_jax"))):
        if os.path.dirname(path) == path:
            return None
        path = os.path.dirname(path)
    return path


SMOKE = os.environ.get("ADA_JAX_NOTEBOOK_SMOKE", "0") == "1"
ROOT = find_root(os.path.abspath(os.environ.get("ADA_JAX_ROOT", os.getcwd())))
if ROOT is None and "google.colab" in sys.modules:  # fresh Colab runtime: clone into ./ada_jax
    ROOT = os.path.abspath("ada_jax")
    if find_root(ROOT) != ROOT:
        subprocess.check_call(["git", "clone", "--depth=1", REPO_URL, ROOT])
if ROOT is None or find_root(ROOT) != ROOT:
    raise FileNotFoundError(f"no ada_jax checkout at or above {os.getcwd()}: open this notebook "
                            "from a clone of the repository or set ADA_JAX_ROOT to one")
try:
    importlib.metadata.version("ada_jax")
except importlib.metadata.PackageNotFoundError:  # once per runtime: dependencies too
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-e", ROOT])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # configs/ is no package; a fresh install imports without restart
print("smoke mode" if SMOKE else "full mode", "| repository:", ROOT)
'''.replace("<REPO_URL>", REPO_URL)

# The tiny dims the smoke mode uses (tests/test_train.py's SMALL_MODEL).
SMOKE_OVERRIDES = r'''
def smoke_overrides(c):
    """Seconds-long runs: random init (no SFT), the learnable synthetic reward, tiny dims."""
    c.sft.steps = 0
    c.task.reward = "synthetic"
    c.log.progress = False
    c.model.update(dict(d_model=64, n_layers=2, d_ff=128, n_heads=4, n_kv_heads=2, head_dim=16))
'''


def _code(src: str):
    return new_code_cell(textwrap.dedent(src).strip("\n"))


def _md(src: str):
    return new_markdown_cell(textwrap.dedent(src).strip("\n"))


# --------------------------------------------------------------------------- quickstart
QUICKSTART = [
    _md('''
    # ada_jax quick start: Ada-Seq-balance vs GRPO on the tiny model

    Trains the embedded tiny transformer on the embedded arithmetic task twice — with
    **Reinforce-Ada-Seq (balance rule)** and with **GRPO, n = 4** — and compares them with
    `ada_jax.plots`. Both runs start from the same supervised warm start (600 SFT steps, as in
    `docs/data.md`: the format is learnt, pass rates spread over the task's levels; trained once
    and cached in `runs/quickstart/base`), then run 40 RL steps each. On 2 CPU cores expect
    roughly ten minutes in all, mostly SFT and the Ada run; a GPU runtime is faster. Re-running
    resumes from the checkpoints in `runs/quickstart/` (delete it to start over).

    Ada-Seq samples each prompt in rounds of M = 8 (at most 4 rounds) until its pool holds
    ≥ 2 correct and ≥ 2 wrong answers, then trains on a balanced group of 4 with the pool's
    pass rate as baseline; GRPO samples 4 per prompt, and a prompt whose 4 rewards are equal
    gives no gradient.
    '''),
    _code(SETUP),
    _code('''
    import tempfile

    from IPython.display import Image, Markdown, display

    from ada_jax import plots, train
    from configs import base
    '''),
    _code(SMOKE_OVERRIDES + r'''

RUNS = os.path.abspath(os.environ.get("ADA_JAX_RUNS", "")
                       or (tempfile.mkdtemp(prefix="ada_jax_quickstart_") if SMOKE
                           else "runs/quickstart"))
ALGOS = {"Ada-Seq-balance": "ada_balance", "GRPO-n4": "grpo"}


def make_config(algo):
    c = base.get_config(f"algo={algo},model=tiny,task=embedded" + (",smoke=True" if SMOKE else ""))
    c.unlock()
    c.sft.base_dir = os.path.join(RUNS, "base")  # one warm start shared by both runs
    if SMOKE:
        smoke_overrides(c)
        c.eval.every = 0
    else:  # same SFT and RL length as scripts/train.py's main job
        c.sft.steps = 600
        c.rl.steps = 40
        c.eval.every = 10
        c.eval.prompts = 64
        c.eval.k = 4
        c.checkpoint.every = 10
    return c


c = make_config("ada_balance")
print("runs in", RUNS)
print(f"SFT {c.sft.steps} steps, RL {c.rl.steps} steps x {c.rl.prompts_per_step} prompts, "
      f"eval every {c.eval.every} steps on {c.eval.prompts} prompts x {c.eval.k} samples")
'''.lstrip("\n")),
    _md('''
    ## Train both

    `train.train_and_evaluate(config, workdir)` writes `metrics.jsonl`, TensorBoard events and
    checkpoints into the workdir and returns the last step's metrics.
    '''),
    _code('''
    last = {}
    for label, algo in ALGOS.items():
        last[label] = train.train_and_evaluate(make_config(algo), os.path.join(RUNS, algo))
        print(label, {k: round(last[label][k], 3) for k in
                      ("reward_mean", "effective_prompt_ratio", "samples_per_prompt_mean")})
    '''),
    _md('''
    ## Compare

    Eval accuracy against steps, generated tokens and wall-clock; the training pool's reward;
    the effective-prompt ratio (share of groups with mixed rewards, i.e. a non-zero
    gradient); the share of all-correct / all-wrong groups among the first n samples; and the
    samples spent per prompt. Ada-Seq buys a higher effective ratio with more samples per
    prompt: compare the curves against tokens, not only steps.
    '''),
    _code('''
    workdirs = [os.path.join(RUNS, algo) for algo in ALGOS.values()]
    for path in plots.plot_runs(workdirs, os.path.join(RUNS, "plots"), labels=list(ALGOS)):
        display(Image(filename=path))
    display(Markdown(plots.markdown_table([plots.summary_row(w) for w in workdirs])))
    '''),
]


# --------------------------------------------------------------------------- theory
THEORY = [
    _md('''
    # The math behind adaptive sampling

    Everything here is computed by `ada_jax.objectives` (f-transforms, allocation solvers, gate
    probability, stopping costs) and `ada_jax.bandit` (an exactly solvable softmax bandit); see
    docs/spec.md §1–4 and §7 and `docs/theory.md`.

    * An RL objective on pass rates, J_f = E_x[f(p(x))], has gradient E_x[f′(p)·∇p]: the
      transform f decides which prompts matter.
    * The variance-optimal sample allocation is N*(p) ∝ f′(p)·√(p(1−p)).
    * A group of n gives a gradient only if its rewards are mixed: probability u(p).
    * Sequential sampling (keep sampling until the pool has enough signal) costs samples that
      grow like 1/p (pos rule) or 1/(p(1−p)) (balance rule).
    '''),
    _code(SETUP),
    _code('''
    import jax
    import matplotlib.pyplot as plt
    import numpy as np
    from IPython.display import Markdown, display

    from ada_jax import advantages
    from ada_jax import bandit as bd
    from ada_jax import objectives as O
    from ada_jax.plots import markdown_table

    p = np.linspace(0.01, 0.99, 25 if SMOKE else 197)
    TRANSFORMS = [("linear", 0.5), ("log", 0.5), ("arcsin", 0.5), ("power", 0.5), ("power", 2.0)]


    def label(name, alpha):
        return f"power(α={alpha:g})" if name == "power" else name
    '''),
    _md('''
    ## 1. f-transforms and their weights w(p) = f′(p)

    linear is plain REINFORCE / RLOO, log is RAFT's implicit objective (hard prompts matter
    most), arcsin 2·arcsin(√p) is GRPO's (both ends), power(α) interpolates. The weights are
    singular at 0 or 1, so the library always evaluates them on a smoothed pass rate.
    '''),
    _code('''
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, alpha in TRANSFORMS:
        ax0.plot(p, O.value(name, p, alpha) - O.value(name, 0.5, alpha), label=label(name, alpha))
        ax1.plot(p, O.weight(name, p, alpha), label=label(name, alpha))
    ax0.set(xlabel="pass rate p", ylabel="f(p) − f(½)", title="objective f")
    ax1.set(xlabel="pass rate p", ylabel="w(p) = f′(p)", yscale="log", title="weight f′")
    for ax in (ax0, ax1):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()
    '''),
    _md('''
    ## 2. Variance-optimal allocation N*(p) per objective

    Minimising V ∝ Σ_i f′(p_i)² p_i(1−p_i) / N_i under Σ N_i = N and N_min ≤ N_i ≤ N_max gives
    N_i* ∝ f′(p_i)·√(p_i(1−p_i)) (water-filling for the box). Below: a batch whose pass rates
    cover (0, 1) evenly, a mean budget of 16 samples per prompt, box [1, 128]. arcsin (GRPO) is
    flat — uniform allocation is already optimal for GRPO; log spends on hard prompts
    (∝ √((1−p)/p)). Ada-Est's 1/√p̂ rule is dashed.
    '''),
    _code('''
    MEAN_BUDGET, N_MAX = 16, 128
    total = MEAN_BUDGET * len(p)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, alpha in TRANSFORMS:
        scores = O.variance_optimal_scores(p, name, alpha)
        ax.plot(p, O.allocate_continuous(scores, total, 1, N_MAX), label=label(name, alpha))
    ax.plot(p, O.est_allocation(p, total, "inv_sqrt", n_max=N_MAX), "k--", lw=1,
            label="Ada-Est 1/√p̂ (integers)")
    ax.set(xlabel="pass rate p", ylabel="samples N*(p)", yscale="log",
           title=f"variance-optimal allocation, mean {MEAN_BUDGET} per prompt")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plt.show()

    batch = np.array([0.03, 0.1, 0.3, 0.5, 0.7, 0.9, 0.97])
    rows = [{"objective": label(n, a),
             **{f"p={q:g}": int(k) for q, k in zip(batch, O.variance_optimal_allocation(
                 batch, 16 * len(batch), n, a, n_min=1, n_max=N_MAX))}}
            for n, a in TRANSFORMS]
    display(Markdown(f"Integer allocations (largest remainder, exact total {16 * len(batch)}):"
                     "\\n\\n" + markdown_table(rows)))
    '''),
    _md('''
    ## 3. Gate probability u(p) = 1 − (1−p)ⁿ − pⁿ

    The chance that a group of n has mixed rewards (otherwise every advantage is 0). For small
    p it is ≈ n·p (dotted): hard prompts need large groups before they teach anything.
    '''),
    _code('''
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for n in (2, 4, 8, 16, 32):
        ax.plot(p, O.gate_prob(p, n), label=f"n = {n}")
    ax.plot(p[p < 0.25], 4 * p[p < 0.25], "k:", lw=1, label="4·p")
    ax.set(xlabel="pass rate p", ylabel="u(p)", ylim=(0, 1.02), title="gate-open probability")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    plt.show()
    '''),
    _md('''
    ## 4. Stopping costs of the pos and balance exit rules

    Samples drawn until the pool meets its rule. One sample at a time and no cap, **pos**
    (≥ K positives) is negative binomial, E[N] = K/p (dotted; it lies on the curve), and
    **balance** (≥ K⁺ positives and ≥ K⁻ negatives) grows like 1/(p(1−p)), cheapest at p = ½.
    The reference schedule checks after rounds of M = 8 and stops after R = 4 rounds
    (N_max = 32): the overshoot above the one-at-a-time curve and the cap at 32 are visible.
    Bands are ± one standard deviation.
    '''),
    _code('''
    q = np.linspace(0.05, 0.95, 10 if SMOKE else 37)
    RULES = [("pos, K=1", 1, 0), ("pos, K=2", 2, 0), ("balance, K⁺=K⁻=2", 2, 2)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, (title, m, r) in zip(axes, [("one sample at a time, no cap", 1, None),
                                        ("rounds of M=8, at most R=4", 8, 4)]):
        for i, (name, k_pos, k_neg) in enumerate(RULES):
            mom = np.array([O.stopping_moments(x, k_pos, k_neg, round_size=m, max_rounds=r)
                            for x in q])
            mean, sd = mom[:, 0], np.sqrt(mom[:, 1])
            ax.plot(q, mean, color=f"C{i}", label=name)
            ax.fill_between(q, np.maximum(mean - sd, 1), mean + sd, color=f"C{i}", alpha=0.15)
            if k_neg == 0 and r is None:
                ax.plot(q, k_pos / q, ":", color=f"C{i}")
        ax.set(xlabel="pass rate p", title=title, yscale="log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("samples to exit E[N]")
    axes[0].legend(fontsize=8)
    plt.tight_layout()
    plt.show()

    budgets, shares = [4, 32, 256], [0.627, 0.169, 0.017]
    print(f"the escalation example: tier cost {O.tier_cost(budgets, shares):.2f} "
          f"samples per prompt (docs/spec.md §4.5: ≈ 12.3); charging unsolved prompts and every "
          f"tier they pass through: {O.escalation_cost(budgets, shares):.2f}")
    '''),
    _md('''
    ## 5. What GRPO really optimises

    On the bandit, any estimator whose advantages depend only on the labels has mean gradient
    w(p)·∇p (`bandit.group_weight` computes w exactly by enumerating label configurations).
    For GRPO, w(p)/f′_arcsin(p) → 1 as n grows; at small n it is damped by the groups that
    collapse (about u(p), dotted) and by the small-sample (Bessel) std.
    '''),
    _code('''
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, n in enumerate((4, 32) if SMOKE else (4, 8, 32)):
        w = np.array([bd.group_weight(lambda r, m, _: advantages.grpo(r, m), float(x), n)
                      for x in q])
        ax.plot(q, w / O.weight("arcsin", q), color=f"C{i}", label=f"GRPO n={n}: w / f′_arcsin")
        ax.plot(q, O.gate_prob(q, n), ":", color=f"C{i}", label=f"u(p), n={n}")
    ax.set(xlabel="pass rate p", ylabel="ratio", title="GRPO's implied weight vs arcsin")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    plt.show()
    '''),
    _md('''
    ## 6. Exact-bandit experiment: variance-optimal vs uniform allocation

    Eight prompts with known pass rates on a softmax bandit. The estimator
    ĝ = (1/B) Σ_b f′(p_b)(1/N_b) Σ_j (r − p_b)∇log π is unbiased for J_f under any allocation;
    its variance depends on the allocation. For each objective: the allocation's predicted
    variance ratio to uniform (docs/spec.md §3's model), the bandit's exact ratio, and a Monte-Carlo
    measurement (± standard error). Expected: well below 1 for log, exactly 1 for arcsin.
    '''),
    _code('''
    P = [0.03, 0.08, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95]
    REPS = 300 if SMOKE else 20_000
    bandit = bd.make(P, n_actions=32, seed=0)
    p_b = np.asarray(bd.pass_rate(bandit.logits_BA, bandit.correct_BA), np.float64)
    uniform = np.full(len(P), 16)
    rows, key = [], jax.random.key(0)
    for f in ("log", "arcsin") if SMOKE else ("log", "power", "arcsin"):
        n_opt = O.variance_optimal_allocation(p_b, int(uniform.sum()), f)
        exact, measured = [], []
        for alloc in (n_opt, uniform):
            key, sub = jax.random.split(key)
            g = bd.monte_carlo(sub, bandit, bd.oracle_estimator(f, alloc).draw, REPS)
            mean = bd.objective_grad(bandit.logits_BA, bandit.correct_BA, f)
            measured.append(bd.measured_variance(g, mean))
            exact.append(bd.oracle_variance(bandit.logits_BA, bandit.correct_BA, alloc, f))
        (va, sa), (vb, sb) = measured
        rows.append({"objective": label(f, 0.5), "allocation": str(list(map(int, n_opt))),
                     "predicted": O.allocation_variance(p_b, n_opt, f)
                     / O.allocation_variance(p_b, uniform, f),
                     "exact": exact[0] / exact[1], "measured": va / vb,
                     "± se": va / vb * np.hypot(sa / va, sb / vb)})
    display(Markdown(f"Pass rates {np.round(p_b, 3).tolist()}, {REPS} draws per cell, "
                     f"total budget {int(uniform.sum())}:\\n\\n" + markdown_table(rows)))

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    x = np.arange(len(rows))
    for i, k in enumerate(("predicted", "exact", "measured")):
        ax.bar(x + (i - 1) * 0.27, [r[k] for r in rows], 0.27, label=k,
               yerr=[r["± se"] for r in rows] if k == "measured" else None)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [r["objective"] for r in rows])
    ax.set(ylabel="variance: optimal / uniform")
    ax.legend(fontsize=8)
    plt.show()
    '''),
]


# --------------------------------------------------------------------------- inspect a run
INSPECT = [
    _md('''
    # Inspect a run

    Point `ADA_JAX_WORKDIR` at a run directory (`scripts/train.py --workdir=…`) and
    `ADA_JAX_CONFIG` at the `get_config` variant it was trained with (default
    `algo=ada_balance`, the main job; pass `smoke=True` etc. as used). Without a workdir the
    notebook reads `<repo>/workdir` (scripts/train.py's default), or in smoke mode trains a
    2-step run first. It plots the metrics, restores the newest checkpoint and samples a few
    completions from it.
    '''),
    _code(SETUP),
    _code('''
    import tempfile

    import jax
    import jax.numpy as jnp
    from IPython.display import Image, Markdown, display

    from ada_jax import collect, evaluate, plots, sampling, train
    from ada_jax.checkpoint import Checkpointer
    from ada_jax.policies.rollout import reward_data
    from configs import base
    '''),
    _code(SMOKE_OVERRIDES + r'''

config = base.get_config(os.environ.get("ADA_JAX_CONFIG", "algo=ada_balance,task=embedded")
                         + (",smoke=True" if SMOKE else ""))
config.unlock()
if SMOKE:
    smoke_overrides(config)
WORKDIR = os.environ.get("ADA_JAX_WORKDIR", "")
if not WORKDIR and SMOKE:
    WORKDIR = tempfile.mkdtemp(prefix="ada_jax_inspect_")
    train.train_and_evaluate(config, WORKDIR)  # smoke config: 2 steps
WORKDIR = os.path.abspath(WORKDIR or os.path.join(ROOT, "workdir"))
print("workdir:", WORKDIR, sorted(os.listdir(WORKDIR)))
'''.lstrip("\n")),
    _md('''
    ## Metrics

    `metrics.jsonl` holds one record per step (and step 0's evaluation); `ada_jax.plots`
    draws the standard figures.
    '''),
    _code('''
    records = plots.load_metrics(WORKDIR)
    display(Markdown(plots.markdown_table([plots.summary_row(WORKDIR)])))
    KEYS = ["step", "reward_mean", "effective_prompt_ratio", "all_correct_before",
            "all_wrong_before", "samples_per_prompt_mean", "generated_tokens", "loss",
            "grad_norm"]
    train_records = [r for r in records if "reward_mean" in r]
    display(Markdown(plots.markdown_table(
        [{k: r.get(k, float("nan")) for k in KEYS} for r in train_records[-8:]])))
    for path in plots.plot_runs([WORKDIR], os.path.join(WORKDIR, "plots")):
        display(Image(filename=path))
    '''),
    _md('''
    ## Restore the newest checkpoint

    The model structure and the tokenizer come from the config (`train.setup`, with SFT
    switched off since only the structure is needed); the weights from the checkpoint.
    '''),
    _code('''
    config.sft.steps = 0  # setup() must not run (or load) a warm start: weights come next
    ctx, init_params = train.setup(config, WORKDIR)
    _, trainable, opt_state = train.init_train_state(ctx, init_params)
    ckpt = Checkpointer(os.path.join(WORKDIR, "checkpoints"))
    restored = train.restore_checkpoint(ckpt, trainable, opt_state,
                                        state=collect.init_state(ctx, init_params))
    ckpt.close()
    if restored is None:
        raise FileNotFoundError(f"no readable checkpoint in {WORKDIR}/checkpoints")
    step, trainable, _, meta = restored
    params = trainable["model"]
    print("restored step", step, "| params:",
          sum(x.size for x in jax.tree.leaves(params)))
    '''),
    _md('''
    ## Sample from it

    A few eval prompts, sampled with the run's training sampler settings
    (`sampling.sample`), decoded with the run's tokenizer and scored by the run's reward.
    '''),
    _code('''
    problems = ctx.eval_problems[:4 if SMOKE else 8]
    toks, mask = evaluate.encode_prompts(ctx.tokenizer, problems, config.task.template,
                                         config.sampling.max_prompt_len)
    out = sampling.sample(ctx.graphdef, params, jnp.asarray(toks), jnp.asarray(mask),
                          jax.random.key(step), cfg=ctx.generator.sampling)
    rewards = ctx.reward_fn(reward_data(config, ctx.tokenizer, problems),
                            jnp.arange(len(problems)), None, out.tokens_BN, out.lengths_B)
    for prob, tokens, n, r in zip(problems, out.tokens_BN.tolist(), out.lengths_B.tolist(),
                                  rewards.tolist()):
        print(f"--- problem {prob.id} (level {prob.level}), reference answer {prob.answer!r}, "
              f"reward {r:g}")
        print(prob.question)
        print(">>>", ctx.tokenizer.decode(tokens[:n]))
    '''),
]

NOTEBOOKS = {"quickstart": QUICKSTART, "theory": THEORY, "inspect_run": INSPECT}


def badge(name: str):
    """The first cell: an "Open in Colab" badge for colab/`name`.ipynb at REPO_URL."""
    colab = REPO_URL.replace("https://github.com/", "https://colab.research.google.com/github/")
    return _md(f'''
    [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}/blob/{BRANCH}/colab/{name}.ipynb)

    Runs top to bottom in a fresh Colab runtime: the setup cell clones the repository
    ({REPO_URL}) and installs it.
    ''')


def build(name: str):
    """The notebook `name` as an nbformat node: deterministic cell ids, no outputs."""
    cells = [badge(name), *NOTEBOOKS[name]]
    nb = new_notebook(cells=[nbformat.from_dict(dict(c)) for c in cells])
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{name}-{i:02d}"
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "colab": {"provenance": [], "toc_visible": True},
    }
    nbformat.validate(nb)
    return nb


def main():
    for name in NOTEBOOKS:
        path = os.path.join(HERE, f"{name}.ipynb")
        nbformat.write(build(name), path)
        print("wrote", path)


if __name__ == "__main__":
    main()
