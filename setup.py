"""meowjax: multi-turn agentic RL for LLM agents in text environments, in JAX/Flax."""
import setuptools

INSTALL_REQUIRES = [
    "jax>=0.10.2,<0.11",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "chex>=0.1.92,<0.2",
    "transformers>=5.0,<6",
    "tokenizers>=0.22,<0.24",
    "safetensors>=0.6,<0.9",
    "gguf>=0.17,<0.20",
    "textworld[pddl]>=1.7.0,<1.8",
    "alfworld==0.4.2",
    "ml-collections>=1.1,<2",
    "tensorboard>=2.21,<3",
    "absl-py>=2.5,<3",
    "numpy>=2.0,<3",
    "matplotlib>=3.8,<4",
    "tqdm>=4.66,<5",
    "psutil>=5.9",
]

TEST_REQUIRES = [
    "pytest>=8,<10",
    # `make test` runs the suite on 2 worker processes (one file per worker: module fixtures
    # are built once).
    "pytest-xdist>=3.5,<4",
    "hypothesis>=6.100,<7",
    # Exactly this CPU build lies on every machine's disk; an unpinned torch pulls a CUDA build.
    "torch==2.13.0",
]

setuptools.setup(
    name="meowjax",
    version="0.1.0",
    description="Multi-turn agentic RL for LLM agents in text environments, in JAX/Flax.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.13",
    packages=setuptools.find_packages(include=["meowjax", "meowjax.*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require={
        "test": TEST_REQUIRES,
        # The TPU compiler for ahead-of-time compiles on a topology description
        # (`benchmarks/aot.py --plan=tpu`); no TPU is needed, libtpu is a PyPI wheel.
        "tpu": ["jax[tpu]>=0.10.2,<0.11"],
    },
)
