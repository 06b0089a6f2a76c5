"""ada_jax: adaptive sampling for RL with verifiable rewards, in JAX/Flax NNX."""
