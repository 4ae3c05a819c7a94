"""Free-text multi-turn rollouts, token in / token out, into host-side :class:`Episode` records.

One episode is one token sequence (full history, the default):

    prompt_0 | a_1 <eot> | delta_1 | a_2 <eot> | delta_2 | ... | a_T <eot>

``prompt_0`` is the chat-template rendering of [system, user(obs_0)] with the generation prompt,
``a_t <eot>`` are the agent's sampled ids *exactly as sampled* (the stop token included), and
``delta_t`` is the environment's reply tokenized as the chat-template delta
(:func:`meowjax.rollout.chat.reply_delta_ids`). Per position:

    loss_mask   = 1 on sampled agent tokens (incl. <eot>), 0 elsewhere
    sample_logp = the sampler's log_softmax(logits / temperature)[token] at agent tokens, 0 elsewhere
    turn_end    = 1 at the last agent token of each turn
    reward      = r_t (the env's reward of turn t) at turn t's turn_end, 0 elsewhere

The collector generates for all live episodes together (one sampler call per turn); episodes
that finish drop out. Two generation paths, the same tokens and log-probs (greedy: the same
argmax up to fp32 rounding of the logits; sampled: row keys folded with the episode index, so a
row draws the same whatever batch it is in):
  - ``kv_reuse=True`` (full history only): each episode keeps its KV cache across turns
    (:mod:`meowjax.rollout.episode_cache`); a turn prefills the tokens appended since the
    episode's last turn (the reply delta) and decodes into the same cache: linear in turns.
  - ``kv_reuse=False``: ``sampler.generate`` re-prefills every episode's whole sequence each
    turn (quadratic in turns); also the path of window mode, whose prompts are not prefixes of
    one another. An episode ends when the env says done (won, lost, or its turn
budget ran out: ``info["truncated"]``), when the env worker failed (``info["env_failure"]``), or
when the next turn could overflow ``max_context`` (``info["overflow"]``): the sequence so far plus
the reply delta plus ``max_action_tokens + 1`` must fit, so rows never exceed ``max_context`` and
nothing is ever truncated silently.

Actions that hit ``max_action_tokens`` without the stop token (counted in ``info["unstopped"]``):
with ``unstopped="send"`` (default) their decoded text is still sent to the env and an <eot> is
appended with loss_mask 0 (the policy did not sample it; it keeps the sequence equal to the
template rendering); the turn's reward sits on the last *sampled* token. With
``unstopped="end"`` the episode ends there (``info["truncated"] = True``, reward 0 for the turn).

Window mode (``ChatFormat.window = k``): each turn's prompt is re-rendered from the last k turns
(see :mod:`meowjax.rollout.chat`); the record still holds the full conversation (for logs and
SFT), and ``turn_prompts`` holds each turn's real prompt. Train on it with
:func:`episode_to_turn_rows` (one row per turn); :func:`episode_to_row` refuses windowed episodes
because their ``sample_logp`` was computed under a different context than the full sequence.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

import jax
import numpy as np

from meowjax.envs.base import ResetResult, StepResult, Task
from meowjax.rollout import chat, episode_cache, trajectory

# pad values for buckets.pack_rows(rows, pad_values=ROW_PAD_VALUES): padding rows get group -1.
ROW_PAD_VALUES: dict[str, float | int] = {"group_id": -1}


@dataclasses.dataclass
class Episode:
    """One trajectory as host numpy arrays of equal length L (see the module docstring).

    info: truncated (env turn budget or unstopped="end"), env_failure, overflow, success_turn
    (1-based turn of the win or None), invalid_actions (count), unstopped (count), max_turns
    (this episode's turn budget).
    turn_prompts: window mode only, the prompt ids of each turn (else None).
    turn_invalid: per agent turn, whether the environment rejected its action.
    """

    tokens: np.ndarray
    loss_mask: np.ndarray
    sample_logp: np.ndarray
    turn_end: np.ndarray
    reward: np.ndarray
    won: bool
    turns: int
    task_id: str
    group_id: int
    info: dict[str, Any]
    actions: list[str] = dataclasses.field(default_factory=list)
    observations: list[str] = dataclasses.field(default_factory=list)
    turn_prompts: list[np.ndarray] | None = None
    turn_invalid: list[bool] = dataclasses.field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def total_reward(self) -> float:
        return float(self.reward.sum())


class SamplerLike(Protocol):
    def generate(self, params: Any, prompts: list[list[int]], rng: jax.Array, **kwargs) -> Any:
        ...


class PoolLike(Protocol):
    def reset(self, tasks: list[Task], max_turns: list[int]) -> list[ResetResult]:
        ...

    def step(self, actions: list[str | None]) -> list[StepResult | None]:
        ...


class _Builder:
    """Appends segments to one episode's sequence; keeps the conversation for template deltas."""

    def __init__(self, tokenizer: Any, system: chat.Message, obs0: str, eot_id: int,
                 window: int | None):
        self.tokenizer, self.system, self.eot_id, self.window = tokenizer, system, eot_id, window
        self.observations: list[str] = [obs0]
        self.actions: list[str] = []          # assistant contents (decode of sampled ids)
        self.env_actions: list[str] = []      # what the env received
        self.act_ids: list[list[int]] = []    # per turn: ids incl. <eot> (sampled or appended)
        self.deltas: list[list[int]] = []     # per turn: env reply delta after act_ids[t]
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.logp: list[float] = []
        self.turn_end: list[int] = []
        self.reward: list[float] = []
        self.turn_prompts: list[np.ndarray] = []
        self.turn_invalid: list[bool] = []
        self._last_end = -1
        self._short_ok, self._short_checks = True, 0
        self._append(chat.prompt_ids(tokenizer, self.messages()))
        self.won, self.done = False, False
        self.info: dict[str, Any] = dict(truncated=False, env_failure=False, overflow=False,
                                         success_turn=None, invalid_actions=0, unstopped=0,
                                         max_turns=None)

    def messages(self) -> list[chat.Message]:
        return chat.build_messages(self.system, self.observations, self.actions)

    def _append(self, ids: Sequence[int], mask: int = 0, logp: Sequence[float] | None = None):
        self.tokens.extend(int(t) for t in ids)
        self.mask.extend([mask] * len(ids))
        self.logp.extend([0.0] * len(ids) if logp is None else [float(x) for x in logp])
        self.turn_end.extend([0] * len(ids))
        self.reward.extend([0.0] * len(ids))

    def prompt(self, pending: tuple[str, Sequence[int]] | None = None) -> list[int]:
        """The ids the policy conditions on for the next action.

        ``pending = (observation, delta)``: the prompt as it would be once that reply is added.
        """
        observations, deltas = self.observations, self.deltas
        if pending is not None:
            observations, deltas = observations + [pending[0]], deltas + [list(pending[1])]
        if self.window is None:
            return list(self.tokens) + ([] if pending is None else list(pending[1]))
        t = len(self.act_ids)
        s = chat.window_start(t, self.window)
        sys_user = chat.build_messages(self.system, [observations[s]], [])
        ids = chat.prompt_ids(self.tokenizer, sys_user)
        for j in range(s, t):
            ids += self.act_ids[j] + deltas[j]
        return ids

    def add_action(self, ids: Sequence[int], logp: Sequence[float], stopped: bool,
                   prompt: Sequence[int]) -> str:
        """Records a sampled action (ids incl. the stop token when ``stopped``); returns env text."""
        ids = [int(t) for t in ids]
        body = ids[:-1] if stopped else ids
        tok = self.tokenizer
        self.actions.append(tok.decode(body, skip_special_tokens=False))
        env_text = tok.decode(body, skip_special_tokens=True).strip()
        self.env_actions.append(env_text)
        self._append(ids, mask=1, logp=logp)
        if not ids:
            raise ValueError("The sampler returned an empty action (length 0); it must emit at "
                             "least one token per turn.")
        self.turn_end[-1] = 1
        self._last_end = len(self.tokens) - 1
        if not stopped:
            self._append([self.eot_id])  # not sampled: mask 0, keeps the template form
        self.act_ids.append(ids if stopped else ids + [self.eot_id])
        if self.window is not None:
            self.turn_prompts.append(np.asarray(prompt, np.int32))
        return env_text

    def add_reward(self, reward: float):
        """Adds the env's reward of the latest turn at that turn's last sampled token."""
        if self._last_end < 0:
            raise ValueError("add_reward before any action.")
        self.reward[self._last_end] += float(reward)

    def reply_delta(self, observation: str) -> list[int]:
        """The env reply's template delta, rendered on a short context for speed.

        Rendering the whole history every turn costs O(turns) per turn; the delta is rendered on
        [system, last user, last assistant] instead and, for the first two turns that have more
        history, checked against the full rendering. A template whose delta depends on earlier
        turns (e.g. numbered turns) fails that check and this episode renders in full from then.
        """
        msgs = self.messages()
        full = lambda: chat.reply_delta_ids(self.tokenizer, msgs, observation, self.eot_id)
        if len(msgs) <= 3 or not self._short_ok:
            return full()
        short = chat.reply_delta_ids(self.tokenizer, [msgs[0]] + msgs[-2:], observation,
                                     self.eot_id)
        if self._short_checks < 2:
            self._short_checks += 1
            reference = full()
            if reference != short:
                self._short_ok = False
                return reference
        return short

    def add_observation(self, observation: str, delta: Sequence[int]):
        self.observations.append(observation)
        self.deltas.append(list(delta))
        self._append(delta)

    def finish(self, task_id: str, group_id: int) -> Episode:
        return Episode(
            tokens=np.asarray(self.tokens, np.int32),
            loss_mask=np.asarray(self.mask, np.int32),
            sample_logp=np.asarray(self.logp, np.float32),
            turn_end=np.asarray(self.turn_end, np.int32),
            reward=np.asarray(self.reward, np.float32),
            won=bool(self.won), turns=len(self.act_ids), task_id=task_id, group_id=int(group_id),
            info=dict(self.info), actions=list(self.env_actions),
            observations=list(self.observations),
            turn_prompts=list(self.turn_prompts) if self.window is not None else None,
            turn_invalid=list(self.turn_invalid))


def to_trajectory(ep: Episode) -> trajectory.Trajectory:
    """The episode as the shared record; the payload is the episode (its token arrays). A turn's
    reward is the reward at its last token, its log-prob the sum over its sampled tokens."""
    logps = trajectory.turn_logp_sums(ep.sample_logp, ep.loss_mask, ep.turn_end)
    rewards = ep.reward[ep.turn_end > 0]
    invalid = list(ep.turn_invalid) + [False] * (ep.turns - len(ep.turn_invalid))
    turns = [trajectory.make_turn(ep.observations[t] if t < len(ep.observations) else "",
                                  ep.actions[t] if t < len(ep.actions) else "",
                                  float(rewards[t]), invalid[t], logps[t])
             for t in range(ep.turns)]
    info = {k: bool(ep.info.get(k, False)) for k in ("truncated", "env_failure", "overflow")}
    return trajectory.Trajectory(ep.task_id, ep.group_id, turns, bool(ep.won),
                                 ep.info.get("success_turn"), info, payload=ep)


def _per_episode_budgets(max_turns: int | Sequence[int], num_tasks: int,
                         group_size: int) -> list[int]:
    n = num_tasks * group_size
    if isinstance(max_turns, (int, np.integer)):
        budgets = [int(max_turns)] * n
    else:
        budgets = [int(m) for m in max_turns]
        if len(budgets) == num_tasks and n != num_tasks:
            budgets = [b for b in budgets for _ in range(group_size)]
        if len(budgets) != n:
            raise ValueError(f"max_turns has {len(budgets)} entries; give one int, one per task "
                             f"({num_tasks}) or one per episode ({n} = tasks x group_size).")
    if min(budgets) < 1:
        raise ValueError(f"max_turns must be >= 1, got {min(budgets)}.")
    return budgets


def _fits(builder: _Builder, max_context: int, max_action_tokens: int,
          pending: tuple[str, Sequence[int]] | None = None) -> bool:
    """Whether the next turn fits: prompt (+ pending reply) + max_action_tokens + 1 <= max_context.

    The +1 leaves room for the eot appended after an unstopped action. Full history: the prompt
    is the whole sequence, so rows never exceed ``max_context``.
    """
    return len(builder.prompt(pending)) + max_action_tokens + 1 <= max_context


def collect_episodes(
    sampler: SamplerLike, params: Any, pool: PoolLike, tokenizer: Any, tasks: Sequence[Task], *,
    group_size: int = 1, max_turns: int | Sequence[int], max_context: int,
    max_action_tokens: int, temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False,
    rng: jax.Array, fmt: chat.ChatFormat = chat.ChatFormat(), unstopped: str = "send",
    group_offset: int = 0, row_offset: int = 0, kv_reuse: bool = False,
) -> list[Episode]:
    """Plays ``group_size`` episodes of every task, all live episodes generating together.

    Episode i = (task i // group_size, member i % group_size); episodes of one task share
    ``group_id = group_offset + task index`` and differ only in sampling randomness: episode i
    samples with row id ``row_offset + i`` (its key is ``fold_in(turn key, row id)``), so a
    caller that splits one list of episodes over several calls (processes) draws the same
    tokens as one call.
    ``max_turns``: one budget for all, one per task, or one per episode (BudgetMix).
    Returns the episodes in that order. See the module docstring for the record, the end rules
    and ``kv_reuse`` (needs a `rollout.sampler.Sampler`; ignored in window mode).
    """
    if group_size < 1:
        raise ValueError(f"group_size={group_size} must be >= 1.")
    if unstopped not in ("send", "end"):
        raise ValueError(f"unstopped={unstopped!r}; choose 'send' or 'end'.")
    if max_action_tokens < 1:
        raise ValueError(f"max_action_tokens={max_action_tokens} must be >= 1.")
    tasks = list(tasks)
    budgets = _per_episode_budgets(max_turns, len(tasks), group_size)
    slot_tasks = [t for t in tasks for _ in range(group_size)]
    group_ids = [group_offset + i for i in range(len(tasks)) for _ in range(group_size)]
    eot = chat.end_of_turn_id(tokenizer)

    resets = pool.reset(slot_tasks, budgets)
    builders: list[_Builder] = []
    if len(resets) != len(slot_tasks):
        raise ValueError(f"pool.reset returned {len(resets)} results for {len(slot_tasks)} "
                         "episodes; the pool must have one slot per episode.")
    for res, budget in zip(resets, budgets):
        if res is None:   # the worker died during reset
            res = ResetResult(observation="", objective="", max_score=0.0,
                              info={"env_failure": True})
        admissible = res.admissible if fmt.show_admissible else None
        system = chat.system_message(res.objective, fmt, admissible)
        b = _Builder(tokenizer, system, res.observation, eot, fmt.window)
        b.info["max_turns"] = budget
        if res.info.get("env_failure"):
            b.info["env_failure"], b.done = True, True
        elif not _fits(b, max_context, max_action_tokens):
            b.info["overflow"], b.done = True, True
        builders.append(b)

    caches = None
    if kv_reuse and fmt.window is None:
        caches = episode_cache.EpisodeCaches(sampler, len(builders), max_context=max_context,
                                             max_new_tokens=max_action_tokens,
                                             row_id_offset=row_offset)
    while True:
        live = [i for i, b in enumerate(builders) if not b.done]
        if not live:
            break
        prompts = [builders[i].prompt() for i in live]
        rng, turn_rng = jax.random.split(rng)
        kw = dict(max_new_tokens=max_action_tokens, temperature=temperature, top_p=top_p,
                  greedy=greedy, stop_ids=(eot,))
        if caches is None:
            out = sampler.generate(params, prompts, turn_rng,
                                   row_ids=[row_offset + i for i in live], **kw)
        else:   # the full-history prompt extends the cached tokens
            new = [p[caches.cached[i]:] for p, i in zip(prompts, live)]
            out = caches.turn(params, live, new, turn_rng, **kw)
        actions: list[str | None] = [None] * len(builders)
        for row, i in enumerate(live):
            n = int(out.lengths_B[row])
            stopped = bool(out.stopped_B[row])
            ids = np.asarray(out.tokens_BT[row, :n]).tolist()
            logp = np.asarray(out.logp_BT[row, :n], np.float32).tolist()
            b = builders[i]
            if not stopped:
                b.info["unstopped"] += 1
            text = b.add_action(ids, logp, stopped, prompts[row])
            if not stopped and unstopped == "end":
                b.info["truncated"], b.done = True, True
                continue
            actions[i] = text
        results = pool.step(actions)
        for i, res in enumerate(results):
            if actions[i] is None:
                continue
            b = builders[i]
            if res is None or res.info.get("env_failure"):
                b.info["env_failure"], b.done = True, True
                continue
            b.add_reward(res.reward)
            b.info["invalid_actions"] += int(bool(res.info.get("invalid", False)))
            b.turn_invalid.append(bool(res.info.get("invalid", False)))
            if res.won:
                b.won = True
                b.info["success_turn"] = len(b.act_ids)
            if res.done or len(b.act_ids) >= b.info["max_turns"]:
                # the budget is enforced here too, whether or not the env enforces it
                b.info["truncated"] = bool(res.info.get("truncated", False)) or not res.done
                b.observations.append(res.observation)
                b.done = True
                continue
            delta = b.reply_delta(res.observation)
            if not _fits(b, max_context, max_action_tokens, (res.observation, delta)):
                b.info["overflow"], b.done = True, True
                b.observations.append(res.observation)
                continue
            b.add_observation(res.observation, delta)
    return [b.finish(t.task_id, g) for b, t, g in zip(builders, slot_tasks, group_ids)]


def expert_episode(tokenizer: Any, reset_result: ResetResult, actions: Sequence[str],
                   observations: Sequence[str], rewards: Sequence[float], *, task_id: str = "",
                   group_id: int = 0, won: bool = True,
                   fmt: chat.ChatFormat = chat.ChatFormat()) -> Episode:
    """The same record from an expert walkthrough (for SFT): actions tokenized canonically + eot.

    ``observations[t]`` / ``rewards[t]`` are the env's reply to ``actions[t]``; the last
    observation is not appended (the sequence ends on the last action's eot, as in rollouts).
    ``sample_logp`` is 0 everywhere. Full history only.
    """
    if fmt.window is not None:
        raise ValueError("expert_episode builds full-history records; use ChatFormat(window=None).")
    if not (len(actions) == len(observations) == len(rewards)):
        raise ValueError(f"expert_episode: {len(actions)} actions, {len(observations)} "
                         f"observations and {len(rewards)} rewards must be equally many.")
    eot = chat.end_of_turn_id(tokenizer)
    admissible = reset_result.admissible if fmt.show_admissible else None
    system = chat.system_message(reset_result.objective, fmt, admissible)
    b = _Builder(tokenizer, system, reset_result.observation, eot, None)
    for t, (action, obs, r) in enumerate(zip(actions, observations, rewards)):
        ids = chat.encode(tokenizer, action.strip()) + [eot]
        b.add_action(ids, [0.0] * len(ids), True, [])
        b.add_reward(r)
        if t + 1 < len(actions):
            b.add_observation(obs, b.reply_delta(obs))
        else:
            b.observations.append(obs)
    b.won = bool(won)
    if won and actions:
        b.info["success_turn"] = len(actions)
    return b.finish(task_id, group_id)


def episode_to_row(ep: Episode) -> dict[str, np.ndarray]:
    """1-D fields of one full-history episode for ``buckets.pack_rows`` (+ 0-d group_id, won)."""
    if ep.turn_prompts is not None:
        raise ValueError("This episode was collected with ChatFormat.window; its sample_logp "
                         "belong to per-turn prompts, not to the full sequence. Use "
                         "episode_to_turn_rows(ep) for it.")
    return dict(tokens=ep.tokens, loss_mask=ep.loss_mask, sample_logp=ep.sample_logp,
                turn_end=ep.turn_end, reward=ep.reward, group_id=np.int32(ep.group_id),
                won=np.float32(ep.won))


def episode_to_turn_rows(ep: Episode) -> list[dict[str, np.ndarray]]:
    """One row per turn of a windowed episode: ``turn_prompt | a_t <eot>`` with that turn's fields.

    Each row's loss_mask / sample_logp / turn_end / reward are the full record's values on the
    turn's action tokens, so ``sum(rows' rewards) == ep.reward.sum()``.
    """
    if ep.turn_prompts is None:
        raise ValueError("episode_to_turn_rows needs an episode collected with ChatFormat.window.")
    ends = np.flatnonzero(ep.turn_end)
    rows = []
    for prompt, start, end in zip(ep.turn_prompts, _action_starts(ep), ends + 1):
        seg, p = slice(start, end), len(prompt)
        rows.append(dict(
            tokens=np.concatenate([prompt, ep.tokens[seg]]).astype(np.int32),
            loss_mask=np.concatenate([np.zeros(p, np.int32), ep.loss_mask[seg]]),
            sample_logp=np.concatenate([np.zeros(p, np.float32), ep.sample_logp[seg]]),
            turn_end=np.concatenate([np.zeros(p, np.int32), ep.turn_end[seg]]),
            reward=np.concatenate([np.zeros(p, np.float32), ep.reward[seg]]),
            group_id=np.int32(ep.group_id), won=np.float32(ep.won)))
    return rows


def _action_starts(ep: Episode) -> list[int]:
    """Start index of each turn's sampled action (first loss_mask=1 token after the previous end)."""
    starts, prev_end = [], -1
    for end in np.flatnonzero(ep.turn_end):
        idx = prev_end + 1
        while ep.loss_mask[idx] == 0:
            idx += 1
        starts.append(int(idx))
        prev_end = int(end)
    return starts
