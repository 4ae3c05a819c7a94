"""Model configuration and size presets for the Llama/Qwen2 decoder family.

`ModelConfig` is a frozen (hashable) dataclass, so it can be a `jax.jit` static argument.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

SUPPORTED_ARCHS = ("llama", "qwen2")
SUPPORTED_DTYPES = ("float32", "bfloat16")
# What a decoder block keeps for the backward pass (`ModelConfig.saved_activations`).
SAVED_ACTIVATIONS = ("projections", "dots", "everything")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Dimensions and numerics of a decoder-only LM.

    Attributes:
      vocab_size: V, rows of the token embedding.
      hidden_size: E, the residual stream width.
      intermediate_size: F, the SwiGLU hidden width.
      num_layers: number of decoder blocks.
      num_heads: H, query heads.
      num_kv_heads: K, key/value heads (GQA: H % K == 0).
      head_dim: D, per-head width (need not equal E / H).
      rope_theta: RoPE base; inv_freq_i = theta^(-2i/D).
      rms_norm_eps: epsilon inside RMSNorm.
      tie_embeddings: output projection is the transposed token embedding.
      qkv_bias: q/k/v projections have a bias (Qwen2).
      max_position_embeddings: informational (exported to config.json).
      dtype: compute dtype ("float32" or "bfloat16"); softmax and logits are always fp32.
      param_dtype: storage dtype of the parameters.
      arch: "llama" or "qwen2" (decides the exported Hugging Face architecture).
      bos_token_id, eos_token_id, pad_token_id: special token ids (-1 when unknown).
      remat: rematerialise each decoder block in the backward pass, keeping only its input
        (least activation memory); overrides ``saved_activations``.
      saved_activations: what each block keeps for the backward pass when ``remat`` is off,
        the rest being recomputed from it (``jax.checkpoint`` policies; same math):
        "projections" (default): the outputs of the q/k/v/o and MLP projections and of
        attention; norms, RoPE, attention scores and the SwiGLU gating are recomputed (memory
        linear in the length). "dots": every matmul output, the [B, H, L, S] attention scores
        too. "everything": no checkpoint, XLA keeps what it likes. On XLA:CPU each kept array
        is one more copy into the layer scan's stacked buffers: "projections" halves a
        SmolLM2-135M update's temp memory, its speed within noise of "everything"
        (``benchmarks/train_step.py --compare_saved_activations --control``,
        ``benchmarks/score_step.py --compare=saved_activations``; figures by commit in
        docs/benchmarks-history.md).
      scan_unroll: decoder blocks per iteration of the layer scan (``nn.scan(unroll=...)``);
        unrolling a shallow model lets XLA fuse across blocks (same params, same math).
      attention_blocks: n, the query blocks of causal self-attention without a KV cache
        (training, scoring; `attention.causal_block_attention`): block i of ceil(L / n) rows
        attends to the keys up to its last row only, so the key blocks above the diagonal are
        never computed ((n + 1) / (2 n) of the scores; same math). 1: one
        ``jax.nn.dot_product_attention`` over the whole row (the reference). Decoding through
        the KV cache always uses the latter.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    qkv_bias: bool = False
    max_position_embeddings: int = 4096
    dtype: str = "float32"
    param_dtype: str = "float32"
    arch: str = "llama"
    bos_token_id: int = -1
    eos_token_id: int = -1
    pad_token_id: int = -1
    remat: bool = False
    saved_activations: str = "projections"
    scan_unroll: int = 1
    attention_blocks: int = 4

    def __post_init__(self) -> None:
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"ModelConfig.arch={self.arch!r}; supported: {SUPPORTED_ARCHS}.")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in SUPPORTED_DTYPES:
                raise ValueError(
                    f"ModelConfig.{name}={getattr(self, name)!r}; supported: {SUPPORTED_DTYPES}."
                )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}."
            )
        if self.saved_activations not in SAVED_ACTIVATIONS:
            raise ValueError(f"ModelConfig.saved_activations={self.saved_activations!r}; "
                             f"choose one of {SAVED_ACTIVATIONS}.")
        if self.scan_unroll < 1:
            raise ValueError(f"scan_unroll={self.scan_unroll} must be >= 1 (1: no unrolling).")
        if self.attention_blocks < 1:
            raise ValueError(f"attention_blocks={self.attention_blocks} must be >= 1 (1: one "
                             "block, jax.nn.dot_product_attention over the whole row).")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE.")

    @property
    def compute_dtype(self) -> jnp.dtype:
        """The jnp dtype used for matmuls."""
        return jnp.dtype(self.dtype)

    @property
    def params_dtype(self) -> jnp.dtype:
        """The jnp dtype parameters are stored in."""
        return jnp.dtype(self.param_dtype)

    def replace(self, **overrides) -> "ModelConfig":
        """Returns a copy with some fields replaced."""
        return dataclasses.replace(self, **overrides)


def num_params(cfg: ModelConfig) -> int:
    """Parameter count of the LM implied by `cfg` (no head for value models)."""
    e, f, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    attn = e * d * (cfg.num_heads * 2 + cfg.num_kv_heads * 2)
    if cfg.qkv_bias:
        attn += d * (cfg.num_heads + 2 * cfg.num_kv_heads)
    layer = attn + 3 * e * f + 2 * e
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * e
    return cfg.vocab_size * e + cfg.num_layers * layer + e + head


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_embeddings=True, qkv_bias=True, max_position_embeddings=4096, arch="qwen2",
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    ),
    "small": ModelConfig(
        vocab_size=2048, hidden_size=256, intermediate_size=768, num_layers=4, num_heads=4,
        num_kv_heads=2, head_dim=64, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_embeddings=True, qkv_bias=True, max_position_embeddings=4096, arch="qwen2",
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    ),
    # HuggingFaceTB/SmolLM2-135M(-Instruct) config.json.
    "smollm2-135m": ModelConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9,
        num_kv_heads=3, head_dim=64, rope_theta=100000.0, rms_norm_eps=1e-5,
        tie_embeddings=True, qkv_bias=False, max_position_embeddings=8192, arch="llama",
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    ),
    # Qwen/Qwen2.5-*-Instruct config.json (eos = <|im_end|>, pad = <|endoftext|>).
    "qwen2.5-0.5b": ModelConfig(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14,
        num_kv_heads=2, head_dim=64, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_embeddings=True, qkv_bias=True, max_position_embeddings=32768, arch="qwen2",
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643,
    ),
    "qwen2.5-1.5b": ModelConfig(
        vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28, num_heads=12,
        num_kv_heads=2, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_embeddings=True, qkv_bias=True, max_position_embeddings=32768, arch="qwen2",
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643,
    ),
    "qwen2.5-7b": ModelConfig(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
        num_heads=28, num_kv_heads=4, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_embeddings=False, qkv_bias=True, max_position_embeddings=32768, arch="qwen2",
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643,
    ),
}


def get_preset(name: str, **overrides) -> ModelConfig:
    """Returns the preset `name` with some fields overridden, e.g. `get_preset("tiny", dtype="bfloat16")`."""
    if name not in PRESETS:
        raise ValueError(f"Unknown model preset {name!r}; choose one of {sorted(PRESETS)}.")
    cfg = PRESETS[name]
    unknown = set(overrides) - {f.name for f in dataclasses.fields(ModelConfig)}
    if unknown:
        raise ValueError(f"Unknown ModelConfig field(s) {sorted(unknown)} in overrides for {name!r}.")
    return dataclasses.replace(cfg, **overrides)
