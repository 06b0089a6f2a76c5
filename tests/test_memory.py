"""The memory estimate (ada_jax/memory.py) against what a run really keeps: the bytes of the live
arrays on a device when the learner starts equal the estimate's resident terms, in refill and in
streaming mode (whose engine keeps no slot caches between calls); every pretrained config fits
one 8xH100 host with 10% headroom."""
import pytest

from ada_jax import collect, host_memory, learn, memory, train
from configs import base
from tests.test_train import _config


@pytest.mark.parametrize("mode", [pytest.param("refill", marks=pytest.mark.slow), "stream"])
def test_live_bytes_when_learning_equal_the_estimate(tmp_path, mode, monkeypatch):
    c = _config("ada_balance", **{"adaptive.mode": mode, "rl.steps": 2,
                                  "rl.prompts_per_step": 4, "checkpoint.every": 10})
    seen = []
    learn_fn = learn.learn

    def spy(*args):
        seen.append(host_memory.live_bytes())
        return learn_fn(*args)
    monkeypatch.setattr(learn, "learn", spy)
    train.train_and_evaluate(c, str(tmp_path))
    est = memory.estimate(c, devices=8)
    terms = est["params"] + est["adam"] + est["batch"] + (est["engine"] if mode == "stream" else 0)
    assert est["resident_learning"] == terms
    # Equal up to the trainer's PRNG keys and scalar counters, which the estimate leaves out
    # (measured: 124 bytes in refill, 286 in stream, of ~134 KB); both steps alike, so nothing
    # accumulates across steps, and the stream's slot caches (65 KB per device here, half the
    # total) are not resident.
    for live in seen:
        assert 0 <= live.total - est["resident_learning"] <= 512, live.arrays[:20]


def test_every_pretrained_config_fits_one_8xh100_host_with_10_percent_headroom():
    for name in base.PRETRAINED:
        for algo in ("ada_balance", "grpo", "ada_est", "dapo"):
            e = memory.estimate(base.get_config(f"model={name},algo={algo}"), 8, 80.0)
            assert e["headroom"] >= 0.10, (name, algo, memory.in_gib(e))
    e = memory.estimate(base.get_config("model=qwen2_5_math_7b"), 8, 80.0)
    assert e["mode"] == "stream" and e["prompts"] == 3 * 512  # lag 2: B + 2B resident


def test_token_logprobs_equal_the_log_softmax_form():
    """The log-normaliser form of token_logprobs (one [B,T,V] array besides the logits) gives
    log_softmax's log-probs and entropy, at temperature 1 and not."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from ada_jax import logprobs
    logits = jax.random.normal(jax.random.key(0), (3, 5, 97)) * 4.0
    targets = jax.random.randint(jax.random.key(1), (3, 5), 0, 97)
    for temp in (1.0, 0.7):
        ref = jax.nn.log_softmax(logits / temp)
        want_logp = jnp.take_along_axis(ref, targets[..., None], -1)[..., 0]
        want_ent = -jnp.sum(jnp.exp(ref) * ref, -1)
        logp, ent = logprobs.token_logprobs(logits, targets, temp)
        np.testing.assert_allclose(logp, want_logp, atol=2e-5)
        np.testing.assert_allclose(ent, want_ent, atol=2e-5)


@pytest.mark.parametrize("share", [False, True])
def test_micro_batched_completion_logprobs_equal_the_whole_batch(share):
    """The reference / proximal log-prob pass in micro-batches (each [rows, N, V] logits array
    one micro-batch's) gives every row's log-probs as the whole batch does, rows in order."""
    import jax
    import numpy as np
    from flax import nnx
    from tests import helpers
    graphdef, params = nnx.split(helpers.tiny_model(seed=3))
    R, P, N = 8, 6, 5
    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(4), 2)  # 2 rows per prompt, one prompt per group
    prompt = rng.integers(1, 64, (4, P))[group]
    tokens = np.concatenate([prompt, rng.integers(1, 64, (R, N))], 1).astype(np.int32)
    mask = np.ones((R, P + N), bool)
    mask[group == 1, :3] = False  # group 1's prompt left-padded
    out = [learn.completion_logprobs(graphdef, params, tokens, mask, group, prompt_len=P,
                                     temperature=1.0, n_groups=4, share=share, micro=micro)
           for micro in (1, 4)]
    assert out[1].shape == (R, N)
    np.testing.assert_allclose(np.asarray(out[1]), np.asarray(out[0]), atol=1e-5)
    assert jax.numpy.isfinite(out[1]).all()


def test_slots_are_capped_at_what_a_step_can_hold():
    """A slot past (prompts in progress) x (a prompt's largest budget) is never assigned, so
    the engine gets no more: the pretrained default of 1024 on 8 prompts x 4 samples is 32."""
    def slots(algo, **adaptive):
        c = base.get_config(f"algo={algo},task=embedded")
        c.unlock()
        c.rl.prompts_per_step = 8
        c.adaptive.update(slots=1024, **adaptive)
        return collect.engine_config(c)[0].slots
    assert slots("grpo") == 8 * 4
    assert slots("ada_balance", samples_per_round=4, max_rounds=4) == 8 * 16
    assert slots("ada_est", est=dict(budget_per_prompt=8)) == 8 * 32
    assert slots("grpo", mode="stream", stream=dict(max_lag=2)) == 3 * 8 * 4
    c = base.get_config("algo=grpo,task=embedded")  # fewer slots than that: unchanged
    assert collect.engine_config(c)[0].slots == min(c.adaptive.slots, c.rl.prompts_per_step * 4)


SMOLLM2_CONFIG = dict(  # SmolLM2-135M-Instruct's config.json (the fields the estimate reads)
    architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=576,
    intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
    head_dim=64, vocab_size=49152, tie_word_embeddings=True, rms_norm_eps=1e-5,
    max_position_embeddings=8192, rope_theta=100000.0, attention_bias=False, mlp_bias=False,
    hidden_act="silu")


def test_the_estimate_reads_model_hf_sizes_from_init_from(tmp_path):
    """model=hf: the architecture comes from init_from's config.json (it was 0s: a division
    by zero), here SmolLM2-135M's: 134.5M params, 0.50 GiB in float32, Adam twice that."""
    import json
    with open(tmp_path / "config.json", "w") as f:
        json.dump(SMOLLM2_CONFIG, f)
    c = base.get_config("model=hf,algo=grpo,task=files")
    c.unlock()
    c.model.init_from = str(tmp_path)
    c.rl.update(prompts_per_step=8, minibatches=1, microbatches=4)
    c.sampling.update(max_prompt_len=128, max_new_tokens=64)
    e = memory.estimate(c, devices=1)
    assert round(e["params_b"] * 1e3, 1) == 134.5
    assert e["params"] == 134_515_008 * 4 and e["adam"] >= 2 * e["params"]
    assert e["slots"] == 32  # the pretrained 1024, capped at 8 prompts x 4 samples
    assert memory.host_peak_bytes(c) > e["params"] + e["adam"] + e["grads"]

