"""Hugging Face checkpoint import/export for Llama/Qwen2 causal LMs (config.json + safetensors).

Names and layouts (HF torch `nn.Linear.weight` is [out, in]; ours are [in, ...out]):
    model.embed_tokens.weight [V, E]                 -> embed.embedding [V, E]
    model.layers.i.self_attn.q_proj.weight [H*D, E]  -> layers.attn.q_proj.kernel[i] [E, H, D]
    model.layers.i.self_attn.q_proj.bias [H*D]       -> layers.attn.q_proj.bias[i] [H, D]
    (k_proj, v_proj likewise with K heads)
    model.layers.i.self_attn.o_proj.weight [E, H*D]  -> layers.attn.o_proj.kernel[i] [H, D, E]
    model.layers.i.mlp.{gate,up}_proj.weight [F, E]  -> layers.mlp.{gate,up}_proj.kernel[i] [E, F]
    model.layers.i.mlp.down_proj.weight [E, F]       -> layers.mlp.down_proj.kernel[i] [F, E]
    model.layers.i.input_layernorm.weight [E]        -> layers.attn_norm.scale[i]
    model.layers.i.post_attention_layernorm.weight   -> layers.mlp_norm.scale[i]
    model.norm.weight [E]                            -> final_norm.scale
    lm_head.weight [V, E]                            -> lm_head.kernel [E, V] (untied only)
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.flax

from meowjax.models import lm
from meowjax.models.config import ModelConfig

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
_ARCH_TO_HF = {v: k for k, v in ARCHITECTURES.items()}
_DTYPE_FROM_HF = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float32"}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclasses.dataclass(frozen=True)
class _Spec:
    """How one HF tensor maps to one of our arrays (per layer for stacked ones)."""

    path: tuple[str, ...]
    hf_name: str
    kind: str  # "copy" | "linear" | "heads_out" | "heads_in" | "bias"


def _hf_shape(kind: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if kind == "copy":
        return shape
    if kind == "linear":
        return shape[::-1]
    if kind == "heads_out":  # ours [E, H, D]
        return (shape[1] * shape[2], shape[0])
    if kind == "heads_in":  # ours [H, D, E]
        return (shape[2], shape[0] * shape[1])
    if kind == "bias":  # ours [H, D]
        return (shape[0] * shape[1],)
    raise ValueError(kind)


def _to_ours(kind: str, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if kind in ("copy", "bias"):
        return x.reshape(shape)
    return x.T.reshape(shape)


def _to_hf(kind: str, x: np.ndarray) -> np.ndarray:
    if kind in ("copy",):
        return x
    if kind == "bias":
        return x.reshape(-1)
    if kind == "linear":
        return x.T
    if kind == "heads_out":
        return x.reshape(x.shape[0], -1).T
    if kind == "heads_in":
        return x.reshape(-1, x.shape[-1]).T
    raise ValueError(kind)


def _specs(cfg: ModelConfig) -> tuple[list[_Spec], list[_Spec]]:
    """(global specs, per-layer specs with '{i}' in the HF name)."""
    glob = [
        _Spec(("embed", "embedding"), "model.embed_tokens.weight", "copy"),
        _Spec(("final_norm", "scale"), "model.norm.weight", "copy"),
    ]
    if not cfg.tie_embeddings:
        glob.append(_Spec(("lm_head", "kernel"), "lm_head.weight", "linear"))
    pre = "model.layers.{i}."
    layer = [
        _Spec(("layers", "attn_norm", "scale"), pre + "input_layernorm.weight", "copy"),
        _Spec(("layers", "mlp_norm", "scale"), pre + "post_attention_layernorm.weight", "copy"),
        _Spec(("layers", "attn", "o_proj", "kernel"), pre + "self_attn.o_proj.weight", "heads_in"),
    ]
    for name in ("q_proj", "k_proj", "v_proj"):
        layer.append(_Spec(("layers", "attn", name, "kernel"), pre + f"self_attn.{name}.weight",
                           "heads_out"))
        if cfg.qkv_bias:
            layer.append(_Spec(("layers", "attn", name, "bias"), pre + f"self_attn.{name}.bias",
                               "bias"))
    for name in ("gate_proj", "up_proj", "down_proj"):
        layer.append(_Spec(("layers", "mlp", name, "kernel"), pre + f"mlp.{name}.weight", "linear"))
    return glob, layer


def _get(tree: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def config_from_hf(hf_config: dict) -> ModelConfig:
    """Maps a Hugging Face config.json dict (Llama/Qwen2 causal LM) to a ModelConfig."""
    archs = hf_config.get("architectures") or []
    arch = next((ARCHITECTURES[a] for a in archs if a in ARCHITECTURES), None)
    if arch is None:
        raise ValueError(
            f"config.json: unsupported architecture {archs or hf_config.get('model_type')!r}; "
            f"supported: {sorted(ARCHITECTURES)}."
        )
    if hf_config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json: hidden_act={hf_config['hidden_act']!r}; only 'silu' is supported.")
    rope = dict(hf_config.get("rope_parameters") or hf_config.get("rope_scaling") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"config.json: rope type {rope_type!r} is not supported (only 'default').")
    theta = rope.get("rope_theta", hf_config.get("rope_theta", 10000.0))
    if arch == "llama":
        if hf_config.get("attention_bias") or hf_config.get("mlp_bias"):
            raise ValueError("config.json: Llama attention_bias/mlp_bias=True is not supported.")
        qkv_bias = False
    else:
        if hf_config.get("use_sliding_window"):
            raise ValueError("config.json: use_sliding_window=True is not supported.")
        qkv_bias = True
    heads = hf_config["num_attention_heads"]
    eos = hf_config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    dtype = _DTYPE_FROM_HF.get(str(hf_config.get("dtype") or hf_config.get("torch_dtype")), "float32")

    def token(value):
        return -1 if value is None else int(value)

    return ModelConfig(
        vocab_size=hf_config["vocab_size"],
        hidden_size=hf_config["hidden_size"],
        intermediate_size=hf_config["intermediate_size"],
        num_layers=hf_config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf_config.get("num_key_value_heads") or heads,
        head_dim=hf_config.get("head_dim") or hf_config["hidden_size"] // heads,
        rope_theta=float(theta),
        rms_norm_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
        qkv_bias=qkv_bias,
        max_position_embeddings=int(hf_config.get("max_position_embeddings", 4096)),
        dtype=dtype,
        param_dtype=dtype,
        arch=arch,
        bos_token_id=token(hf_config.get("bos_token_id")),
        eos_token_id=token(eos),
        pad_token_id=token(hf_config.get("pad_token_id")),
    )


def config_to_hf(cfg: ModelConfig) -> dict:
    """A config.json dict that `transformers` loads as LlamaForCausalLM / Qwen2ForCausalLM."""
    def token(value):
        return None if value < 0 else value

    out = {
        "architectures": [_ARCH_TO_HF[cfg.arch]],
        "model_type": cfg.arch,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": cfg.tie_embeddings,
        "dtype": cfg.param_dtype,
        "bos_token_id": token(cfg.bos_token_id),
        "eos_token_id": token(cfg.eos_token_id),
        "pad_token_id": token(cfg.pad_token_id),
        "use_cache": True,
    }
    if cfg.arch == "llama":
        out.update(attention_bias=False, mlp_bias=False)
    else:
        out.update(use_sliding_window=False)
    return out


def _put(x: np.ndarray, sharding) -> jax.Array:
    return jax.device_put(x, sharding) if sharding is not None else jnp.asarray(x)


def params_from_hf_state_dict(
    cfg: ModelConfig, state_dict: dict[str, np.ndarray], *, shardings: Any = None,
    source: str = "state_dict",
) -> lm.Params:
    """Renames/transposes/stacks HF tensors into our params (cast to cfg.param_dtype).

    Args:
      shardings: optional pytree of `jax.sharding.Sharding` matching the params; each array is
        placed directly with `jax.device_put`.
      source: named in error messages (e.g. the checkpoint folder).
    Raises:
      ValueError naming the tensor when one is missing, has the wrong shape or is unexpected.
    """
    shapes = lm.abstract_params(cfg)
    dtype = cfg.params_dtype
    used: set[str] = set()

    def fetch(name: str, kind: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in state_dict:
            raise ValueError(f"{source}: missing tensor {name!r} (expected shape {_hf_shape(kind, shape)}).")
        x = np.asarray(state_dict[name])
        if tuple(x.shape) != _hf_shape(kind, shape):
            raise ValueError(
                f"{source}: tensor {name!r} has shape {tuple(x.shape)}, expected "
                f"{_hf_shape(kind, shape)} for this config.json."
            )
        used.add(name)
        return _to_ours(kind, x, shape).astype(dtype)

    glob, layer = _specs(cfg)
    params: dict = {}
    for spec in glob:
        shape = _get(shapes, spec.path).shape
        sharding = _get(shardings, spec.path) if shardings is not None else None
        _set(params, spec.path, _put(fetch(spec.hf_name, spec.kind, shape), sharding))
    for spec in layer:
        shape = _get(shapes, spec.path).shape[1:]
        stacked = np.stack(
            [fetch(spec.hf_name.format(i=i), spec.kind, shape) for i in range(cfg.num_layers)]
        )
        sharding = _get(shardings, spec.path) if shardings is not None else None
        _set(params, spec.path, _put(stacked, sharding))
    extra = sorted(
        k for k in state_dict
        if k not in used and not k.endswith(_IGNORED_SUFFIXES)
        and not (cfg.tie_embeddings and k == "lm_head.weight")
    )
    if extra:
        raise ValueError(
            f"{source}: unexpected tensors {extra[:8]}{'...' if len(extra) > 8 else ''} "
            "that this config.json does not describe (wrong num_hidden_layers, bias flags or "
            "architecture?)."
        )
    return params


def params_to_hf_state_dict(cfg: ModelConfig, params: lm.Params) -> dict[str, np.ndarray]:
    """Inverse of `params_from_hf_state_dict` (host numpy, the params' dtype)."""
    glob, layer = _specs(cfg)
    out: dict[str, np.ndarray] = {}
    for spec in glob:
        out[spec.hf_name] = np.ascontiguousarray(_to_hf(spec.kind, np.asarray(_get(params, spec.path))))
    for spec in layer:
        stacked = np.asarray(_get(params, spec.path))
        for i in range(cfg.num_layers):
            out[spec.hf_name.format(i=i)] = np.ascontiguousarray(_to_hf(spec.kind, stacked[i]))
    return out


def _weight_files(folder: str) -> list[str]:
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        files = [os.path.join(folder, name) for name in sorted(set(weight_map.values()))]
        for path in files:
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} is listed in {index} but does not exist.")
        return files
    files = sorted(
        os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".safetensors")
    )
    if not files:
        raise FileNotFoundError(
            f"{folder}: no *.safetensors weights (nor model.safetensors.index.json) found; "
            "save the checkpoint with safe_serialization=True."
        )
    return files


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file as host numpy arrays (bf16 via ml_dtypes)."""
    out = {}
    with jax.default_device(jax.devices("cpu")[0]):
        with safetensors.safe_open(path, framework="flax") as f:
            for name in f.keys():
                out[name] = np.asarray(f.get_tensor(name))
    return out


def read_hf_config(folder: str) -> dict:
    """config.json of a checkpoint folder, with errors naming the missing path."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"Checkpoint folder {folder} does not exist.")
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} not found: a Hugging Face checkpoint folder needs config.json and *.safetensors."
        )
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_hf_checkpoint(
    folder: str, *, dtype: str | None = None, shardings: Any = None,
) -> tuple[ModelConfig, lm.Params]:
    """Reads config.json + *.safetensors (sharded index too) into (cfg, params).

    Args:
      dtype: "float32" | "bfloat16" for both params and compute; default: the checkpoint's.
      shardings: optional pytree of shardings matching the params (see `lm.logical_axes`).
    """
    cfg = config_from_hf(read_hf_config(folder))
    if dtype is not None:
        cfg = cfg.replace(dtype=dtype, param_dtype=dtype)
    state_dict: dict[str, np.ndarray] = {}
    for path in _weight_files(folder):
        state_dict.update(read_safetensors(path))
    params = params_from_hf_state_dict(cfg, state_dict, shardings=shardings, source=folder)
    return cfg, params


def save_hf_checkpoint(folder: str, cfg: ModelConfig, params: lm.Params, tokenizer: Any = None) -> None:
    """Writes config.json + model.safetensors (+ tokenizer files) loadable by `transformers`."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config_to_hf(cfg), f, indent=2)
    state_dict = params_to_hf_state_dict(cfg, params)
    with jax.default_device(jax.devices("cpu")[0]):
        tensors = {k: jnp.asarray(v) for k, v in state_dict.items()}
        safetensors.flax.save_file(
            tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"}
        )
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def load_tokenizer(folder: str):
    """`transformers.AutoTokenizer` from a local folder (never the hub)."""
    import transformers  # local import: heavy, and only needed here

    if not os.path.isdir(folder):
        raise FileNotFoundError(f"Tokenizer folder {folder} does not exist.")
    try:
        return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(
            f"{folder}: no loadable tokenizer files (tokenizer.json / tokenizer_config.json): {e}"
        ) from e
