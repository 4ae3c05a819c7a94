"""Free-text multi-turn rollouts: record layout, token-in/token-out, end rules (scripted policy)."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest
import transformers

from meowjax.envs.base import ResetResult, StepResult, Task
from meowjax.rollout import buckets, chat, episodes
from meowjax.rollout.tokenizer import train_bpe_tokenizer

GAME_TEXT = [
    "You are in room 0. A corridor leads north. go north go south take key open door",
    "Welcome! Reach room 3 to win. I don't understand that. current state: your action:",
    "You win! The door is locked. inventory look examine",
] * 10


@pytest.fixture(scope="module")
def tok():
    return train_bpe_tokenizer(GAME_TEXT, vocab_size=320)


class CorridorEnv:
    """Deterministic fake TextEnv: 'go north' moves one room; room `goal` wins (reward 1)."""

    def __init__(self, goal: int = 3):
        self.goal = goal

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        self.room, self.turn, self.max_turns = 0, 0, max_turns
        self.goal = int(task.meta.get("goal", self.goal))
        return ResetResult(observation=self._obs(), objective=f"Reach room {self.goal} to win.",
                           max_score=1.0, walkthrough=["go north"] * self.goal,
                           admissible=["go north", "look"])

    def _obs(self) -> str:
        return f"You are in room {self.room}. A corridor leads north."

    def step(self, action: str) -> StepResult:
        self.turn += 1
        invalid = action != "go north"
        if not invalid:
            self.room += 1
        won = self.room >= self.goal
        truncated = not won and self.turn >= self.max_turns
        obs = "You win!" if won else ("I don't understand that." if invalid else self._obs())
        return StepResult(observation=obs, reward=1.0 if won else 0.0, done=won or truncated,
                          won=won, info=dict(invalid=invalid, truncated=truncated,
                                             turn=self.turn, score=float(won)))

    def close(self) -> None:
        pass


class InProcessPool:
    """The EnvPool reset/step API over in-process envs (slot i = episode i)."""

    def __init__(self, make_env=CorridorEnv):
        self.make_env = make_env
        self.envs: list = []
        self.step_calls: list[list] = []

    def reset(self, tasks, max_turns):
        self.envs = [self.make_env() for _ in tasks]
        return [e.reset(t, m) for e, t, m in zip(self.envs, tasks, max_turns)]

    def step(self, actions):
        self.step_calls.append(list(actions))
        return [None if a is None else e.step(a) for e, a in zip(self.envs, actions)]


class ScriptedSampler:
    """Emits canonical ids of policy(prompt_text) + eot; logp[j] = -0.01 * (j + 1) - 0.1 * row."""

    def __init__(self, tokenizer, policy, pad_id=0):
        self.tok, self.policy, self.pad_id = tokenizer, policy, pad_id
        self.calls: list[int] = []
        self.prompts: list[list[int]] = []

    def generate(self, params, prompts, rng, *, max_new_tokens, temperature, top_p, greedy,
                 stop_ids, row_ids=None):
        self.calls.append(len(prompts))
        self.prompts.extend(prompts)
        eot = stop_ids[0]
        rows = []
        for i, p in enumerate(prompts):
            text = self.policy(self.tok.decode(p), i)
            ids = chat.encode(self.tok, text) + [eot]
            rows.append(ids[:max_new_tokens])
        b = len(rows)
        tokens = np.full((b, max_new_tokens), self.pad_id, np.int32)
        logp = np.zeros((b, max_new_tokens), np.float32)
        lengths = np.array([len(r) for r in rows], np.int32)
        for i, r in enumerate(rows):
            tokens[i, :len(r)] = r
            logp[i, :len(r)] = -0.01 * (np.arange(len(r)) + 1) - 0.1 * i
        stopped = np.array([r[-1] == eot for r in rows])
        return types.SimpleNamespace(tokens_BT=tokens, logp_BT=logp, logp_raw_BT=logp,
                                     lengths_B=lengths, stopped_B=stopped)


def always(text):
    return lambda prompt, row: text


def tasks(n, goal=3):
    return [Task(task_id=f"corridor/{i}", path="", family="fake", meta={"goal": goal})
            for i in range(n)]


def collect(tok, policy, *, n_tasks=1, **kw):
    kw.setdefault("max_turns", 5)
    kw.setdefault("max_context", 2048)
    kw.setdefault("max_action_tokens", 8)
    kw.setdefault("rng", jax.random.PRNGKey(0))
    sampler, pool = ScriptedSampler(tok, policy), InProcessPool()
    eps = episodes.collect_episodes(sampler, None, pool, tok, tasks(n_tasks), **kw)
    return eps, sampler, pool


def conversation(ep: episodes.Episode, obj="Reach room 3 to win.", fmt=chat.ChatFormat()):
    system = chat.system_message(obj, fmt)
    return chat.build_messages(system, ep.observations[:ep.turns], ep.actions)


def test_tokens_equal_template_rendering(tok):
    eps, _, _ = collect(tok, always("go north"))
    ep = eps[0]
    assert ep.won and ep.turns == 3 and ep.info["success_turn"] == 3
    text = chat.conversation_text(tok, conversation(ep), chat.end_of_turn_id(tok))
    assert ep.tokens.tolist() == chat.encode(tok, text)
    assert tok.decode(ep.tokens.tolist()) == text
    assert text.endswith("go north<|im_end|>")
    assert ep.tokens.dtype == np.int32 and ep.sample_logp.dtype == np.float32


def test_mask_logp_turn_end_reward_layout(tok):
    eps, _, _ = collect(tok, always("go north"))
    ep = eps[0]
    eot = chat.end_of_turn_id(tok)
    agent = ep.tokens[ep.loss_mask == 1].tolist()
    assert tok.decode(agent) == "go north<|im_end|>" * 3
    # turn_end = last token of each contiguous agent run; each is the eot.
    m = ep.loss_mask
    runs_end = np.flatnonzero((m == 1) & (np.append(m[1:], 0) == 0))
    np.testing.assert_array_equal(np.flatnonzero(ep.turn_end), runs_end)
    assert (ep.tokens[runs_end] == eot).all() and ep.turn_end.sum() == ep.turns
    # reward only at turn ends: sparse win at the last one.
    assert np.flatnonzero(ep.reward).tolist() == [runs_end[-1]] and ep.reward.sum() == 1.0
    # sample_logp: the sampler's values at agent tokens, 0 elsewhere.
    n = len(chat.encode(tok, "go north")) + 1
    expected = np.tile(-0.01 * (np.arange(n) + 1), 3).astype(np.float32)
    np.testing.assert_allclose(ep.sample_logp[m == 1], expected, rtol=1e-6)
    assert (ep.sample_logp[m == 0] == 0).all()
    assert ep.tokens[-1] == eot and ep.length == len(ep.tokens)


def test_prompts_are_the_episode_prefix_each_turn(tok):
    eps, sampler, _ = collect(tok, always("go north"))
    ep = eps[0]
    ends = np.flatnonzero(ep.turn_end)
    starts = [0] + list(ends[:-1] + 1)
    for t, prompt in enumerate(sampler.prompts):
        first_agent = np.flatnonzero(ep.loss_mask[starts[t]:])[0] + starts[t]
        assert prompt == ep.tokens[:first_agent].tolist()
    # the delta after an action is the ChatML user message + generation prompt
    delta = tok.decode(ep.tokens[ends[0] + 1: np.flatnonzero(ep.loss_mask[ends[0] + 1:])[0]
                                 + ends[0] + 1].tolist())
    assert delta == ("\n<|im_start|>user\ncurrent state: You are in room 1. A corridor leads "
                     "north.\n\nyour action: <|im_end|>\n<|im_start|>assistant\n")


def test_groups_batched_generation_and_dropout(tok):
    # odd rows of the first call say "look" (invalid), so group members differ.
    def policy(prompt, row):
        return "look" if "room 0" in prompt.split("current state:")[-1] and row % 2 else "go north"

    eps, sampler, pool = collect(tok, policy, n_tasks=2, group_size=3, max_turns=[4, 6],
                                 group_offset=10)
    assert [e.group_id for e in eps] == [10, 10, 10, 11, 11, 11]
    assert [e.task_id for e in eps] == ["corridor/0"] * 3 + ["corridor/1"] * 3
    # one generate call per turn with all live episodes; finished ones drop out.
    assert sampler.calls[0] == 6 and sampler.calls == sorted(sampler.calls, reverse=True)
    assert len(sampler.calls) == max(e.turns for e in eps)
    for call in pool.step_calls:
        assert len(call) == 6
    assert all(e.won for e in eps)
    assert [e.info["invalid_actions"] for e in eps] == [0, 1, 0, 1, 0, 1]
    assert [e.turns for e in eps] == [3, 4, 3, 4, 3, 4]


def test_per_episode_max_turns_are_respected(tok):
    eps, _, _ = collect(tok, always("look"), n_tasks=1, group_size=3, max_turns=[1, 2, 3])
    assert [e.turns for e in eps] == [1, 2, 3] == [e.info["max_turns"] for e in eps]
    assert all(e.info["truncated"] and not e.won for e in eps)
    assert all(e.info["invalid_actions"] == e.turns for e in eps)
    with pytest.raises(ValueError, match="max_turns has 2 entries"):
        collect(tok, always("look"), n_tasks=1, group_size=3, max_turns=[1, 2])


def test_context_overflow_ends_episode(tok):
    full, _, _ = collect(tok, always("look"), max_turns=10)
    lengths = np.flatnonzero(full[0].turn_end) + 1   # sequence length after each turn
    max_context = int(lengths[2]) + 8 + 1           # turn 4 cannot fit its reply + 8 tokens + eot
    eps, _, _ = collect(tok, always("look"), max_turns=10, max_context=max_context)
    ep = eps[0]
    assert ep.info["overflow"] and not ep.info["truncated"] and ep.turns == 3
    assert ep.length <= max_context
    np.testing.assert_array_equal(ep.tokens, full[0].tokens[:ep.length])
    # a first prompt that cannot fit ends the episode at once, with no agent tokens.
    eps, sampler, _ = collect(tok, always("look"), max_context=20)
    assert eps[0].info["overflow"] and eps[0].turns == 0 and eps[0].loss_mask.sum() == 0
    assert sampler.calls == []


def test_unstopped_action_is_sent_with_unsampled_eot(tok):
    long = "go north go north go north"
    n = 4
    assert len(chat.encode(tok, long)) > n
    eps, _, pool = collect(tok, always(long), max_turns=2, max_action_tokens=n)
    ep = eps[0]
    eot = chat.end_of_turn_id(tok)
    sent = tok.decode(chat.encode(tok, long)[:n]).strip()
    assert pool.step_calls[0] == [sent] and ep.info["unstopped"] == 2 and ep.turns == 2
    ends = np.flatnonzero(ep.turn_end)
    assert (ep.tokens[ends + 1] == eot).all() and (ep.loss_mask[ends + 1] == 0).all()
    assert ep.loss_mask.sum() == 2 * n
    sampled = tok.decode(chat.encode(tok, long)[:n])   # the assistant content, unstripped
    msgs = chat.build_messages(chat.system_message("Reach room 3 to win."), ep.observations[:2],
                               [sampled] * 2)
    text = chat.conversation_text(tok, msgs, eot)
    assert tok.decode(ep.tokens.tolist()) == text
    eps, _, pool = collect(tok, always(long), max_turns=2, max_action_tokens=n, unstopped="end")
    assert eps[0].turns == 1 and eps[0].info["truncated"] and pool.step_calls == [[None]]


def test_window_prompts_match_windowed_rendering(tok):
    fmt = chat.ChatFormat(window=1)
    eps, sampler, _ = collect(tok, always("look"), max_turns=4, fmt=fmt)
    ep = eps[0]
    system = chat.system_message("Reach room 3 to win.", fmt)
    assert len(ep.turn_prompts) == 4
    for t, prompt in enumerate(ep.turn_prompts):
        s = max(0, t - 1)
        msgs = chat.build_messages(system, ep.observations[s:t + 1], ep.actions[s:t])
        assert prompt.tolist() == chat.prompt_ids(tok, msgs) == sampler.prompts[t]
    rows = episodes.episode_to_turn_rows(ep)
    assert len(rows) == 4 and sum(r["reward"].sum() for r in rows) == ep.reward.sum()
    for r, prompt in zip(rows, ep.turn_prompts):
        assert r["tokens"][:len(prompt)].tolist() == prompt.tolist()
        assert tok.decode(r["tokens"][r["loss_mask"] == 1].tolist()) == "look<|im_end|>"
        assert r["turn_end"].sum() == 1 and r["turn_end"][-1] == 1
    with pytest.raises(ValueError, match="episode_to_turn_rows"):
        episodes.episode_to_row(ep)


def test_expert_episode_matches_rollout_record(tok):
    eps, _, _ = collect(tok, always("go north"))
    env = CorridorEnv()
    res = env.reset(tasks(1)[0], 5)
    steps = [env.step(a) for a in res.walkthrough]
    ex = episodes.expert_episode(tok, res, res.walkthrough, [s.observation for s in steps],
                                 [s.reward for s in steps], task_id="corridor/0")
    for k in ("tokens", "loss_mask", "turn_end", "reward"):
        np.testing.assert_array_equal(getattr(ex, k), getattr(eps[0], k))
    assert ex.won and ex.turns == 3 and (ex.sample_logp == 0).all()


def test_episode_rows_pack_into_buckets(tok):
    eps, _, _ = collect(tok, always("go north"), n_tasks=2, group_size=2)
    rows = [episodes.episode_to_row(e) for e in eps]
    batch = buckets.pack_rows(rows, length_buckets=[128, 512], num_rows=8,
                              pad_values=episodes.ROW_PAD_VALUES)
    assert batch["tokens"].shape == (8, 512) and batch["group_id"].tolist() == [0, 0, 1, 1] + [-1] * 4
    np.testing.assert_array_equal(batch["mask"].sum(1)[:4], [e.length for e in eps])
    np.testing.assert_array_equal(batch["loss_mask"][0, :eps[0].length], eps[0].loss_mask)


def test_template_without_prefix_property_is_rejected(tok):
    bad = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer,
                                               eos_token="<|im_end|>", pad_token="<pad>")
    bad.chat_template = ("{{ messages|length }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                         "{{ m['content'] }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(chat.ChatTemplateError, match="prefix"):
        collect(bad, always("go north"))


def test_bad_arguments_are_named(tok):
    with pytest.raises(ValueError, match="group_size"):
        collect(tok, always("x"), group_size=0)
    with pytest.raises(ValueError, match="unstopped"):
        collect(tok, always("x"), unstopped="drop")
    with pytest.raises(ValueError, match="window"):
        chat.ChatFormat(window=-1)


def test_history_dependent_template_falls_back_to_full_rendering(tok):
    numbered = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer,
                                                    eos_token="<|im_end|>", pad_token="<pad>")
    numbered.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ loop.index }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant {{ messages|length + 1 }}\n{% endif %}")
    eps, _, _ = collect(numbered, always("look"), max_turns=4)
    ep = eps[0]
    text = chat.conversation_text(numbered, conversation(ep), chat.end_of_turn_id(numbered))
    assert "<|im_start|>user 8\n" in text
    assert ep.tokens.tolist() == chat.encode(numbered, text)


def test_env_failures_end_episodes_and_are_counted(tok):
    class FlakyPool(InProcessPool):
        def reset(self, tasks, max_turns):
            out = super().reset(tasks, max_turns)
            out[0] = None                                   # worker died at reset
            return out

        def step(self, actions):
            out = super().step(actions)
            if len(self.step_calls) == 2:
                out[1] = StepResult("", 0.0, True, False, {"env_failure": True})
            return out

    pool = FlakyPool()
    eps = episodes.collect_episodes(ScriptedSampler(tok, always("go north")), None, pool, tok,
                                    tasks(3), max_turns=5, max_context=2048,
                                    max_action_tokens=8, rng=jax.random.PRNGKey(0))
    assert [e.info["env_failure"] for e in eps] == [True, True, False]
    assert [e.turns for e in eps] == [0, 2, 3] and [e.won for e in eps] == [False, False, True]
    assert pool.step_calls[0][0] is None and eps[1].reward.sum() == 0


def test_turn_budget_enforced_even_if_env_ignores_it(tok):
    class EndlessEnv(CorridorEnv):
        def step(self, action):
            res = super().step(action)
            return StepResult(res.observation, 0.0, False, False, {"invalid": True})

    pool = InProcessPool(EndlessEnv)
    eps = episodes.collect_episodes(ScriptedSampler(tok, always("look")), None, pool, tok,
                                    tasks(2), max_turns=[2, 3], max_context=2048,
                                    max_action_tokens=8, rng=jax.random.PRNGKey(0))
    assert [e.turns for e in eps] == [2, 3] and all(e.info["truncated"] for e in eps)
