"""Parity of our Flax LM with the transformers PyTorch models, through HF import/export."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from meowjax.models import config as config_lib
from meowjax.models import hf_io, lm

VOCAB = 96


def _torch_model(arch: str) -> torch.nn.Module:
    """A tiny transformers model with every weight (biases, norms too) randomised."""
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    if arch == "qwen2":
        hf_cfg = transformers.Qwen2Config(**common, tie_word_embeddings=True, rms_norm_eps=1e-6,
                                          rope_parameters={"rope_type": "default", "rope_theta": 1e4})
        model = transformers.Qwen2ForCausalLM(hf_cfg)
    else:
        hf_cfg = transformers.LlamaConfig(**common, head_dim=12, tie_word_embeddings=False,
                                          rms_norm_eps=1e-5,
                                          rope_parameters={"rope_type": "default", "rope_theta": 5e3})
        model = transformers.LlamaForCausalLM(hf_cfg)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.2 * noise)
    return model.eval()


def _batch():
    """Row 0: 9 real tokens; row 1: left-padded by 3; row 2: right-padded by 2."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, VOCAB, size=(3, 9)).astype(np.int32)
    mask = np.ones((3, 9), np.int32)
    mask[1, :3] = 0
    mask[2, 7:] = 0
    tokens[mask == 0] = 0
    pos = np.asarray(lm.positions_from_mask(jnp.asarray(mask)))
    return tokens, pos, mask


def _torch_logits(model, tokens, pos, mask) -> np.ndarray:
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    position_ids=torch.tensor(pos, dtype=torch.long))
    return out.logits.float().numpy()


_forward = jax.jit(lm.forward, static_argnums=1)


def _ours(cfg, params, tokens, pos, mask) -> np.ndarray:
    return np.asarray(_forward(params, cfg, jnp.asarray(tokens), jnp.asarray(pos), jnp.asarray(mask)))


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_import_and_export_match_transformers_logits(arch, tmp_path):
    model = _torch_model(arch)
    model.save_pretrained(tmp_path / "theirs")
    cfg, params = hf_io.load_hf_checkpoint(str(tmp_path / "theirs"), dtype="float32")
    assert cfg.arch == arch and cfg.qkv_bias == (arch == "qwen2")
    assert cfg.tie_embeddings == (arch == "qwen2")
    tokens, pos, mask = _batch()
    real = mask.astype(bool)
    ours = _ours(cfg, params, tokens, pos, mask)
    ref = _torch_logits(model, tokens, pos, mask)
    assert np.abs(ref).max() > 1.0  # non-trivial logits
    np.testing.assert_allclose(ours[real], ref[real], atol=1e-4, rtol=1e-4)
    # Rows are independent of their padding: the left-padded row equals its real part alone.
    alone_tokens, alone_pos = tokens.copy(), pos.copy()
    alone_tokens[1, :6], alone_pos[1, :6] = tokens[1, 3:], pos[1, 3:]
    alone_mask = mask.copy()
    alone_mask[1] = [1] * 6 + [0] * 3
    alone = _ours(cfg, params, alone_tokens, alone_pos, alone_mask)
    np.testing.assert_allclose(ours[1, 3:], alone[1, :6], atol=1e-5)

    # Export: perturbed params -> our safetensors/config.json -> transformers -> same logits.
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: x + 0.1 * rng.standard_normal(x.shape, np.float32), params)
    hf_io.save_hf_checkpoint(str(tmp_path / "ours"), cfg, params)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "ours")).eval()
    np.testing.assert_allclose(_ours(cfg, params, tokens, pos, mask)[real],
                               _torch_logits(loaded, tokens, pos, mask)[real], atol=1e-4, rtol=1e-4)
    # And back through our own import: the same config and identical params.
    cfg2, params2 = hf_io.load_hf_checkpoint(str(tmp_path / "ours"))
    assert cfg2 == cfg
    jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_state_dict_round_trip_and_logical_axes():
    cfg = config_lib.get_preset("tiny", tie_embeddings=False)
    params = lm.init_params(cfg, jax.random.key(0))
    sd = hf_io.params_to_hf_state_dict(cfg, params)
    assert sd["model.layers.1.self_attn.q_proj.weight"].shape == (4 * 16, 64)
    assert sd["lm_head.weight"].shape == (512, 64)
    back = hf_io.params_from_hf_state_dict(cfg, sd)
    jax.tree.map(np.testing.assert_array_equal, back, params)
    axes = lm.logical_axes(cfg)
    is_leaf = lambda x: isinstance(x, tuple)
    assert jax.tree.structure(axes, is_leaf=is_leaf) == jax.tree.structure(params)
    jax.tree.map(lambda a, p: len(a) == p.ndim or pytest.fail(f"{a} vs {p.shape}"),
                 axes, params, is_leaf=is_leaf)


@pytest.fixture(scope="module")
def good_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    _torch_model("qwen2").save_pretrained(folder)
    return folder


def _copy(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as f, open(os.path.join(dst, name), "wb") as g:
            g.write(f.read())
    return str(dst)


def test_bad_folder_errors(good_folder, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        hf_io.load_hf_checkpoint(str(tmp_path / "nope"))
    no_cfg = _copy(good_folder, tmp_path / "no_cfg")
    os.remove(os.path.join(no_cfg, "config.json"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        hf_io.load_hf_checkpoint(no_cfg)
    no_w = _copy(good_folder, tmp_path / "no_w")
    os.remove(os.path.join(no_w, "model.safetensors"))
    with pytest.raises(FileNotFoundError, match=r"no_w.*safetensors"):
        hf_io.load_hf_checkpoint(no_w)


def _edit_config(folder, **changes):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        c = json.load(f)
    c.update(changes)
    with open(path, "w") as f:
        json.dump(c, f)


def test_wrong_shape_unknown_arch_and_missing_tensor(good_folder, tmp_path):
    wide = _copy(good_folder, tmp_path / "wide")
    _edit_config(wide, intermediate_size=64)
    with pytest.raises(ValueError, match=r"model.layers.0.mlp.gate_proj.weight.*\(48, 32\).*\(64, 32\)"):
        hf_io.load_hf_checkpoint(wide)
    arch = _copy(good_folder, tmp_path / "arch")
    _edit_config(arch, architectures=["MistralForCausalLM"], model_type="mistral")
    with pytest.raises(ValueError, match=r"config.json.*MistralForCausalLM.*LlamaForCausalLM"):
        hf_io.load_hf_checkpoint(arch)
    deep = _copy(good_folder, tmp_path / "deep")
    _edit_config(deep, num_hidden_layers=3)
    with pytest.raises(ValueError, match=r"missing tensor 'model.layers.2.input_layernorm.weight'"):
        hf_io.load_hf_checkpoint(deep)
    shallow = _copy(good_folder, tmp_path / "shallow")
    _edit_config(shallow, num_hidden_layers=1)
    with pytest.raises(ValueError, match=r"unexpected tensors.*model.layers.1"):
        hf_io.load_hf_checkpoint(shallow)


def test_load_with_shardings_and_bf16(good_folder):
    cfg, _ = hf_io.load_hf_checkpoint(str(good_folder))
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shardings = jax.tree.map(lambda _: sharding, lm.abstract_params(cfg))
    cfg16, params16 = hf_io.load_hf_checkpoint(str(good_folder), dtype="bfloat16", shardings=shardings)
    assert cfg16.dtype == "bfloat16"
    leaves = jax.tree.leaves(params16)
    assert all(x.dtype == jnp.bfloat16 and x.sharding == sharding for x in leaves)


def test_presets():
    assert config_lib.get_preset("tiny").num_layers == 2
    assert abs(config_lib.num_params(config_lib.get_preset("small")) - 4e6) < 1e6
    assert abs(config_lib.num_params(config_lib.get_preset("qwen2.5-0.5b")) - 494e6) < 5e6
    assert abs(config_lib.num_params(config_lib.get_preset("smollm2-135m")) - 134.5e6) < 1e6
    with pytest.raises(ValueError, match="qwen2.5-7b"):
        config_lib.get_preset("gpt5")
    hash(config_lib.get_preset("qwen2.5-7b"))
    n = sum(x.size for x in jax.tree.leaves(lm.abstract_params(config_lib.get_preset("qwen2.5-1.5b"))))
    assert n == config_lib.num_params(config_lib.get_preset("qwen2.5-1.5b"))


def test_sharded_index_and_bf16_round_trip(good_folder, tmp_path):
    _torch_model("qwen2").save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 2
    cfg, params = hf_io.load_hf_checkpoint(str(tmp_path / "sharded"))
    _, ref = hf_io.load_hf_checkpoint(str(good_folder))
    jax.tree.map(np.testing.assert_array_equal, params, ref)
    # bf16 params are written as BF16 safetensors and read back bit-exactly.
    cfg16 = cfg.replace(dtype="bfloat16", param_dtype="bfloat16")
    params16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    hf_io.save_hf_checkpoint(str(tmp_path / "bf16"), cfg16, params16)
    cfg_back, back = hf_io.load_hf_checkpoint(str(tmp_path / "bf16"))
    assert cfg_back.param_dtype == "bfloat16" and cfg_back.dtype == "bfloat16"
    jax.tree.map(lambda a, b: (a.dtype == b.dtype == jnp.bfloat16) or pytest.fail(str(a.dtype)),
                 back, params16)
    jax.tree.map(np.testing.assert_array_equal, back, params16)
