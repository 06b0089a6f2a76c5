"""Verifiable rewards: the embedded task's token-level scorer (jittable) and the math-verify
worker pool for problems from files."""
from ada_jax.rewards.embedded import encode_answers, score_text, score_tokens, token_scorer
from ada_jax.rewards.math_verifier import MathVerifierPool, last_boxed

__all__ = ["encode_answers", "score_text", "score_tokens", "token_scorer", "MathVerifierPool",
           "last_boxed", "math_verifier_from_config"]


def math_verifier_from_config(config) -> MathVerifierPool:
    """The pool with config.task.verifier_workers (default 2) and verifier_timeout_s (5.0)."""
    return MathVerifierPool(num_workers=config.task.get("verifier_workers", 2),
                            timeout_s=config.task.get("verifier_timeout_s", 5.0))
