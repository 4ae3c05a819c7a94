"""Rollouts on two small real TextWorld games: a walkthrough replayed through collect_episodes
gives the same record as expert_episode, and both equal the chat-template rendering."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from meowjax.envs.pool import EnvPool
from meowjax.envs.registry import EnvSpec
from meowjax.envs.textworld_env import TextWorldEnv
from meowjax.envs.expert import expert_trajectory
from meowjax.envs.textworld_games import GameSetSpec, generate_games
from meowjax.rollout import chat, episodes
from meowjax.rollout.tokenizer import train_bpe_tokenizer

from test_rollout_episodes import ScriptedSampler

pytestmark = pytest.mark.slow   # ~2-6 s per game generation


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    spec = GameSetSpec(kind="custom", split="train", num_games=2, world_size=2, nb_objects=3,
                       quest_length=2)
    tasks = generate_games(spec, str(tmp_path_factory.mktemp("tw")), workers=1)
    env = TextWorldEnv(reward_mode="dense")
    experts = [expert_trajectory(env, t, max_turns=10) for t in tasks]
    env.close()
    return tasks, experts


def test_walkthrough_rollout_equals_expert_record(games):
    tasks, experts = games
    assert all(e["won"] for e in experts)
    texts = [o for e in experts for o in e["observations"]] + [e["objective"] for e in experts]
    tok = train_bpe_tokenizer(texts * 3, vocab_size=400)
    by_objective = {e["objective"]: e["actions"] for e in experts}
    assert len(by_objective) == 2, "the two games should differ"

    def replay(prompt: str, row: int) -> str:
        objective = next(o for o in by_objective if o in prompt)
        turn = prompt.count("<|im_start|>assistant") - 1
        return by_objective[objective][turn]

    with EnvPool(EnvSpec("textworld", {"reward_mode": "dense"}), num_workers=0) as pool:
        eps = episodes.collect_episodes(
            ScriptedSampler(tok, replay), None, pool, tok, tasks, group_size=1, max_turns=10,
            max_context=4096, max_action_tokens=16, rng=jax.random.PRNGKey(0))
    eot = chat.end_of_turn_id(tok)
    for ep, ex, task in zip(eps, experts, tasks):
        assert ep.won and ep.turns == len(ex["actions"]) and ep.info["success_turn"] == ep.turns
        assert ep.actions == ex["actions"]
        # dense rewards at the turn ends, summing to the game's max score
        np.testing.assert_allclose(ep.reward[ep.turn_end == 1], ex["rewards"])
        assert ep.total_reward == pytest.approx(task.meta.get("max_score", sum(ex["rewards"])))
        res = TextWorldEnv(reward_mode="dense").reset(task, 10)
        expert = episodes.expert_episode(tok, res, ex["actions"], ex["observations"][1:],
                                         ex["rewards"], task_id=task.task_id)
        for k in ("tokens", "loss_mask", "turn_end", "reward"):
            np.testing.assert_array_equal(getattr(expert, k), getattr(ep, k))
        msgs = chat.build_messages(chat.system_message(ex["objective"]),
                                   ex["observations"][:ep.turns], ex["actions"])
        assert ep.tokens.tolist() == chat.encode(tok, chat.conversation_text(tok, msgs, eot))
