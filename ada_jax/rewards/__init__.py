"""Verifiable rewards, one module each (import them directly; this file stays empty so the
math verifier's worker processes never import JAX):

  embedded       the embedded task's scorer on token ids (jittable) and on text
  math_verifier  last \\boxed{} + math-verify in a worker pool with per-sample timeouts
"""
