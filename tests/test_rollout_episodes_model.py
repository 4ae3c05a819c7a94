"""Rollouts with the real tiny model and sampler: recorded log-probs equal the trainer's forward,
on both generation paths (re-prefill each turn; per-episode KV cache kept across turns)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rollout import buckets, chat, episodes
from meowjax.rollout.sampler import Sampler
from meowjax.rollout.tokenizer import train_bpe_tokenizer

from test_rollout_episodes import GAME_TEXT, InProcessPool, tasks

TEMPERATURE = 0.7
pytestmark = pytest.mark.slow   # ~25 s of CPU per path: sampler compiles + one forward compile


@pytest.fixture(scope="module", params=[False, True], ids=["reprefill", "kv_cache_turns"])
def setup(request):
    tok = train_bpe_tokenizer(GAME_TEXT, vocab_size=320)
    cfg = get_preset("tiny", vocab_size=len(tok), dtype="float32")
    params = lm.init_params(cfg, jax.random.PRNGKey(1))
    sampler = Sampler(cfg, prompt_buckets=(512,), batch_buckets=(4,), max_new_tokens=6,
                      pad_id=tok.pad_token_id)
    pool = InProcessPool()
    eps = episodes.collect_episodes(
        sampler, params, pool, tok, tasks(2), group_size=2, max_turns=[2, 3],
        max_context=512, max_action_tokens=6, temperature=TEMPERATURE, top_p=1.0,
        rng=jax.random.PRNGKey(7), kv_reuse=request.param)
    return tok, cfg, params, eps, pool


def test_recorded_logp_equal_trainer_forward(setup):
    """Trainer path: episode rows packed into one [B, L] bucket, one jitted forward."""
    tok, cfg, params, eps, _ = setup
    batch = buckets.pack_rows([episodes.episode_to_row(e) for e in eps], length_buckets=[512],
                              num_rows=4, pad_values=episodes.ROW_PAD_VALUES)

    @jax.jit
    def recompute(params, tokens_BL, mask_BL):
        logits = lm.forward(params, cfg, tokens_BL, lm.positions_from_mask(mask_BL), mask_BL)
        return lm.token_logprobs(logits[:, :-1], tokens_BL[:, 1:], TEMPERATURE)

    logp = np.asarray(recompute(params, batch["tokens"], batch["mask"]))
    agent = batch["loss_mask"][:, 1:] == 1
    assert agent.sum() > 0 and (batch["loss_mask"][:, 0] == 0).all()
    assert agent.sum() == sum(e.loss_mask.sum() for e in eps)
    np.testing.assert_allclose(batch["sample_logp"][:, 1:][agent], logp[agent],
                               atol=2e-5, rtol=1e-5)


def test_sampled_episode_decodes_to_template_rendering(setup):
    tok, _, _, eps, pool = setup
    eot = chat.end_of_turn_id(tok)
    assert [ep.turns for ep in eps] == [2, 2, 3, 3]      # a random policy never wins
    assert [ep.group_id for ep in eps] == [0, 0, 1, 1]
    for ep in eps:
        ends = np.flatnonzero(ep.turn_end)
        # assistant contents = decode of each turn's sampled ids without the stop token
        contents, sent, start = [], [], 0
        for end in ends:
            idx = np.flatnonzero(ep.loss_mask[start:end + 1])
            ids = ep.tokens[start + idx].tolist()
            body = ids[:-1] if ids[-1] == eot else ids
            contents.append(tok.decode(body))
            sent.append(tok.decode(body, skip_special_tokens=True).strip())
            start = end + 1
        system = chat.system_message("Reach room 3 to win.")
        msgs = chat.build_messages(system, ep.observations[:ep.turns], contents)
        assert tok.decode(ep.tokens.tolist()) == chat.conversation_text(tok, msgs, eot)
        assert ep.actions == sent
    assert [c[i] for c in pool.step_calls[:2] for i in range(4)] == \
        [eps[i].actions[t] for t in range(2) for i in range(4)]
    # the two members of a group sampled different actions (different randomness)
    assert eps[0].tokens.tolist() != eps[1].tokens.tolist()
