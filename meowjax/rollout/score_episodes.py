"""Multi-turn episodes under the admissible-command scoring interface (see ``scoring``).

Each turn the prompt is the chat-template rendering of the (windowed) conversation; the
candidates are the game's admissible commands, each tokenized as assistant content followed by
the end-of-turn token (so a candidate's score is the likelihood of the *complete* reply). All
live episodes of a batch are scored together in one jitted call per turn (fixed ``[B, L]``
shapes: rows padded to a row bucket <= ``batch_rows`` (``buckets.row_bucket``: the batch shrinks as
episodes end), lengths to a length bucket); the command is drawn on the host
from ``pi = softmax(s / tau)`` with a seeded numpy generator (exact resume).

Host record per turn: the packed row, the chosen candidate, its log pi at sampling time, the
turn reward. Per episode: won, turns, task_id, group_id, success_turn, and info with truncated
(turn budget), env_failure (worker died) and overflow (the next turn's prompt + candidates did
not fit the largest length bucket: the episode ends there, counted, never truncated).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from meowjax.envs.base import Task
from meowjax.rollout import buckets, chat, scoring, trajectory

SCORE_INSTRUCTION = "You are an agent playing a text adventure game. Reply with one command."


@dataclasses.dataclass
class Turn:
    row: dict[str, np.ndarray]      # packed prompt + candidates (scoring.pack_turn)
    chosen: int
    logp: float                     # log pi(chosen) at sampling time
    reward: float
    action: str
    invalid: bool = False
    observation: str = ""           # what the action was taken in


@dataclasses.dataclass
class ScoreEpisode:
    task_id: str
    group_id: int
    max_turns: int
    turns: list[Turn] = dataclasses.field(default_factory=list)
    won: bool = False
    success_turn: int | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))


def to_trajectory(ep: ScoreEpisode) -> trajectory.Trajectory:
    """The episode as the shared record; the payload is the episode (its turns' packed rows and
    chosen candidates)."""
    turns = [trajectory.make_turn(t.observation, t.action, t.reward, t.invalid, t.logp)
             for t in ep.turns]
    return trajectory.Trajectory(ep.task_id, ep.group_id, turns, bool(ep.won), ep.success_turn,
                                 dict(ep.info), payload=ep)


class PromptBuilder:
    """Renders prompts and tokenizes candidate commands (with a cache: commands repeat a lot)."""

    def __init__(self, tokenizer, window: int, max_cands: int, history: bool = False,
                 state_budget: bool = False):
        self.tok = tokenizer
        self.window = window
        self.history = history
        self.state_budget = state_budget
        self.max_cands = max_cands
        self.fmt = chat.ChatFormat(instruction=SCORE_INSTRUCTION, window=window)
        self._cand_cache: dict[str, list[int]] = {}
        self.eot = tokenizer.eos_token_id

    def messages(self, objective: str, observations: Sequence[str],
                 actions: Sequence[str], budget: int | None = None) -> list[dict[str, str]]:
        """system, then (obs_s, a_s+1, ..., obs_t) with s = max(0, t - window).

        history=True prefixes the last observation with the episode's actions so far
        (``"Actions so far: a_1; a_2; ..."`` or ``"none"``): a compact memory of progress beyond
        the window (which steps of the objective are done), at ~5 tokens per past turn.
        state_budget=True prefixes it with the turns left of the episode's ``budget``
        (``"Turns left: 3 of 8"``): the prompt states the budget, so an agent can act on it
        (Pass@(K,T) must then be measured per budget, not read off one run at T_max).
        """
        t = len(actions)
        s = max(0, t - self.window)
        msgs = [chat.system_message(objective, self.fmt)]
        for i in range(s, t):
            msgs.append(chat.user_message(observations[i]))
            msgs.append({"role": "assistant", "content": actions[i]})
        last = observations[t]
        if self.history:
            last = history_line(actions) + "\n" + last.strip()
        if self.state_budget:
            last = budget_line(budget, t) + "\n" + last.strip()
        msgs.append(chat.user_message(last))
        return msgs

    def prompt_ids(self, objective, observations, actions, budget=None) -> list[int]:
        text = self.tok.apply_chat_template(self.messages(objective, observations, actions,
                                                          budget),
                                            tokenize=False, add_generation_prompt=True)
        return self.tok.encode(text, add_special_tokens=False)

    def candidate_ids(self, command: str) -> list[int]:
        ids = self._cand_cache.get(command)
        if ids is None:
            ids = self.tok.encode(command, add_special_tokens=False) + [self.eot]
            self._cand_cache[command] = ids
        return ids

    def row(self, objective, observations, actions, commands,
            budget: int | None = None) -> dict[str, np.ndarray]:
        return scoring.pack_turn(self.prompt_ids(objective, observations, actions, budget),
                                 [self.candidate_ids(c) for c in commands], self.max_cands)


def history_line(actions: Sequence[str]) -> str:
    """``"Actions so far: a_1; a_2"`` (``"Actions so far: none"`` on the first turn)."""
    return "Actions so far: " + ("; ".join(a.strip() for a in actions) if actions else "none")


def budget_line(budget: int | None, turns_done: int) -> str:
    """``"Turns left: 3 of 8"`` before the agent's (turns_done + 1)-th action."""
    if budget is None or budget < 1:
        raise ValueError(f"policy.state_budget=True needs the episode's turn budget (>= 1), got "
                         f"{budget!r}; pass budget= to PromptBuilder.row.")
    return f"Turns left: {budget - turns_done} of {budget}"


def sample_from_logp(logp_C: np.ndarray, rng: np.random.Generator, greedy: bool) -> int:
    """Index drawn from exp(logp) (argmax when greedy); -inf entries are never drawn."""
    if greedy:
        return int(np.argmax(logp_C))
    p = np.exp(logp_C - np.max(logp_C))
    p = p / p.sum()
    return int(rng.choice(len(p), p=p))


def collect(score_fn: Callable[[dict[str, np.ndarray]], np.ndarray], pool, builder: PromptBuilder,
            tasks: Sequence[Task], *, group_size: int, max_turns: Sequence[int],
            batch_rows: int, length_buckets: Sequence[int],
            rng: np.random.Generator | Sequence[np.random.Generator],
            greedy: bool = False, min_rows: int = 4, group_offset: int = 0,
            forced: tuple[int, str] | None = None) -> list[ScoreEpisode]:
    """Plays ``len(tasks) * group_size`` episodes in parallel; returns them in slot order.

    forced: ``(t, command)`` plays ``command`` as every episode's turn t (0-based) where it is
    admissible, whatever the policy prefers (a probe of how the policy goes on after an action
    it did not choose); its log-prob is recorded as the policy's for that command.

    score_fn(batch) -> log pi [batch_rows, max_cands] (host numpy) for a packed batch.
    max_turns: one budget per episode (BudgetMix samples them), len = len(tasks) * group_size.
    rng: one stream for all draws (in turn, then slot order), or one per episode, so an
    episode's draws do not depend on the others played beside it (a multi-process run splits
    the episodes). Episodes of task i get ``group_id = group_offset + i``.
    """
    slots = [t for t in tasks for _ in range(group_size)]
    if len(max_turns) != len(slots):
        raise ValueError(f"max_turns has {len(max_turns)} budgets for {len(slots)} episodes.")
    if len(slots) > batch_rows:
        raise ValueError(f"{len(slots)} episodes exceed rollout.batch_rows={batch_rows}.")
    rngs = [rng] * len(slots) if isinstance(rng, np.random.Generator) else list(rng)
    if len(rngs) != len(slots):
        raise ValueError(f"{len(rngs)} random streams for {len(slots)} episodes; give one "
                         "Generator or one per episode.")
    groups = [group_offset + i // group_size for i in range(len(slots))]
    resets = pool.reset(list(slots), list(max_turns))
    eps = [ScoreEpisode(t.task_id, g, m) for t, g, m in zip(slots, groups, max_turns)]
    objectives = [r.objective for r in resets]
    observations = [[r.observation] for r in resets]
    actions: list[list[str]] = [[] for _ in slots]
    admissible = [list(r.admissible or []) for r in resets]
    live = [True] * len(slots)
    for i, cmds in enumerate(admissible):
        if not cmds:
            raise ValueError(f"Task {slots[i].task_id} gave no admissible commands; the scoring "
                             "interface needs the env built with admissible=True.")
    while any(live):
        idx, rows = [], []
        for i in range(len(slots)):
            if not live[i]:
                continue
            row = builder.row(objectives[i], observations[i], actions[i], admissible[i],
                              budget=max_turns[i])
            if len(row["tokens"]) > max(length_buckets):
                # The turn does not fit the largest bucket: end the episode and say so (never
                # truncate). Raise rollout.length_buckets or lower policy.window if this is common.
                live[i] = False
                eps[i].info = {"truncated": False, "env_failure": False, "overflow": True}
                continue
            idx.append(i)
            rows.append(row)
        if not idx:
            break
        batch = buckets.pack_rows(rows, length_buckets=length_buckets,
                                  num_rows=buckets.row_bucket(len(rows), batch_rows, min_rows),
                                  pad_values={"cand": builder.max_cands},
                                  what="rollout.length_buckets (scoring prompt + candidates)")
        logp_BC = score_fn(batch)
        step_actions: list[str | None] = [None] * len(slots)
        chosen = {}
        for j, i in enumerate(idx):
            c = sample_from_logp(logp_BC[j, :len(admissible[i])], rngs[i], greedy)
            if forced and len(actions[i]) == forced[0] and forced[1] in admissible[i]:
                c = admissible[i].index(forced[1])
            chosen[i] = (j, c)
            step_actions[i] = admissible[i][c]
        results = pool.step(step_actions)
        for i in idx:
            j, c = chosen[i]
            res = results[i]
            eps[i].turns.append(Turn(row=rows[j], chosen=c, logp=float(logp_BC[j, c]),
                                     reward=float(res.reward), action=step_actions[i],
                                     invalid=bool(res.info.get("invalid", False)),
                                     observation=observations[i][-1]))
            actions[i].append(step_actions[i])
            observations[i].append(res.observation)
            admissible[i] = list(res.info.get("admissible") or admissible[i])
            if res.done:
                live[i] = False
                eps[i].won = bool(res.won)
                eps[i].success_turn = len(eps[i].turns) if res.won else None
                eps[i].info = {k: res.info.get(k, False) for k in ("truncated", "env_failure")}
                eps[i].info["overflow"] = False
    return eps


def expert_turns(builder: PromptBuilder, objective: str, observations: Sequence[str],
                 actions: Sequence[str], admissible: Sequence[Sequence[str]],
                 rewards: Sequence[float] = (), budget: int | None = None) -> list[dict]:
    """SFT rows from an expert trajectory: packed row + index of the expert's command.

    ``budget``: the turn budget a prompt that states it (``state_budget``) shows.
    Steps whose expert command is not admissible are skipped (counted by the caller).
    """
    out = []
    for t, a in enumerate(actions):
        cmds = list(admissible[t])
        if a not in cmds:
            continue
        row = builder.row(objective, observations, actions[:t], cmds, budget=budget)
        row["chosen"] = np.int32(cmds.index(a))
        out.append(row)
    return out
