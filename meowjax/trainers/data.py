"""Host-side data for a run: game sets, expert trajectories, the game-text tokenizer, budgets."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import ml_collections
import numpy as np
from absl import logging

from meowjax.envs import textworld_games
from meowjax.envs.base import Task
from meowjax.envs.registry import EnvSpec, make_env
from meowjax.rollout import score_episodes
from meowjax.rollout import tokenizer as tok_lib


def budget_plan(c: ml_collections.ConfigDict) -> dict[str, int]:
    """The SFT -> RL split of one budget counted in RL episodes.

    sft_demos = share * total / demo_cost   (one demonstration costs demo_cost episodes),
    rl_episodes = (1 - share) * total.
    Checked before any game is built: the demonstrations fit games.num_sft, and an RL
    iteration's rollout.tasks_per_iter distinct tasks fit the RL pool (games.num_train +
    games.num_train_hard).
    """
    b, g = c.budget, c.games
    if not 0.0 <= b.sft_share <= 1.0:
        raise ValueError(f"budget.sft_share={b.sft_share} must be in [0, 1].")
    demos = int(round(b.sft_share * b.total_episodes / b.sft_demo_cost))
    if demos > g.num_sft:
        raise ValueError(f"The budget asks for {demos} SFT demonstrations but games.num_sft="
                         f"{g.num_sft}; raise games.num_sft or lower budget.sft_share.")
    rl_episodes = int(round((1 - b.sft_share) * b.total_episodes))
    pool = g.num_train + g.num_train_hard
    if rl_episodes and c.rollout.tasks_per_iter > pool:
        raise ValueError(
            f"rollout.tasks_per_iter={c.rollout.tasks_per_iter} distinct tasks per RL iteration, "
            f"but the RL pool has {pool} (games.num_train={g.num_train} + games.num_train_hard="
            f"{g.num_train_hard}); lower rollout.tasks_per_iter or raise games.num_train.")
    return {"sft_demos": demos, "rl_episodes": rl_episodes}


def env_spec(c: ml_collections.ConfigDict, *, admissible: bool) -> EnvSpec:
    """The spec to build envs from; ``env.reward_mode="process"`` wraps the family in the
    expert-plan-progress reward of ``meowjax.eval.process_reward``."""
    from meowjax.eval import process_reward
    return process_reward.wrap_spec(EnvSpec(c.env.family, env_kwargs(c, admissible=admissible)))


def env_kwargs(c: ml_collections.ConfigDict, *, admissible: bool) -> dict[str, Any]:
    """Constructor options of the configured env family."""
    if c.env.family == "swe":
        return dict(reward=c.env.reward_mode, invalid_action_penalty=c.env.invalid_action_penalty)
    kw = dict(reward_mode=c.env.reward_mode, invalid_action_penalty=c.env.invalid_action_penalty,
              admissible=admissible)
    if c.env.family == "textworld":
        kw["compact"] = c.env.compact
    return kw


def _spec(c, split: str, num: int, hard: bool) -> textworld_games.GameSetSpec:
    g = c.games
    w, o, q = ((g.hard_world_size, g.hard_nb_objects, g.hard_quest_length) if hard
               else (g.world_size, g.nb_objects, g.quest_length))
    return textworld_games.GameSetSpec(kind=g.kind, world_size=w, nb_objects=o, quest_length=q,
                                       split=split, num_games=num, level=g.level)


def difficulty_name(c: ml_collections.ConfigDict, hard: bool) -> str:
    """The name of the training (or harder) difficulty in reports: a TextWorld game-set name
    ("w2-o3-q4"), a code-repair tier ("code-repair tier 1") or an ALFWorld split of the eval
    sets ("ALFWorld test", "ALFWorld valid_unseen")."""
    if c.env.family == "swe":
        return f"code-repair tier {_swe_tier(c.games, hard)}"
    if c.env.family == "alfworld":
        return f"ALFWorld {_alfworld_eval_split(c.games, hard)}"
    return _spec(c, "train", 0, hard).name


def _swe_tier(g: ml_collections.ConfigDict, hard: bool) -> int:
    """The code-repair tier of the training difficulty (games.level) or the next one, capped at
    the last tier of `swe.tasks.TIERS`."""
    from meowjax.envs.swe import tasks as swe_tasks
    return min(g.level + 1, max(swe_tasks.TIERS)) if hard else g.level


def _alfworld_eval_split(g: ml_collections.ConfigDict, hard: bool) -> str:
    """ALFWorld's held-out split: seen rooms (valid_seen while tuning, else test) or, harder,
    the unseen rooms."""
    if hard:
        return "valid_unseen"
    return "valid_seen" if g.eval_split == "valid" else "test"


def game_sets(c: ml_collections.ConfigDict) -> dict[str, list[Task]]:
    """train / sft / eval (held-out, training difficulty) / eval_hard, disjoint seed ranges.

    Held-out games come from ``games.eval_split``: "test" for reported numbers, "valid" while
    tuning (never tune on the test seeds). The RL pool ("train") is ``num_train`` games of the
    training difficulty plus ``num_train_hard`` of the harder one, from the train seed range
    (disjoint from every held-out game).
    """
    g = c.games
    if c.env.family != "textworld":
        if g.num_train_hard:
            raise ValueError(f"games.num_train_hard={g.num_train_hard} is for TextWorld games; "
                             f"env.family={c.env.family!r} has no harder RL pool: set it to 0.")
        return _other_family_sets(c)
    wanted = {"train": _spec(c, "train", g.num_train, False),
              "train_hard": _spec(c, "train", g.num_train_hard, True),
              "sft": _spec(c, "sft", g.num_sft, False),
              "eval": _spec(c, g.eval_split, g.num_eval, False),
              "eval_hard": _spec(c, g.eval_split, g.num_eval_hard, True)}
    out = {}
    for name, spec in wanted.items():
        if spec.num_games == 0:
            out[name] = []
            continue
        out[name] = textworld_games.generate_games(spec, g.cache_dir, workers=g.gen_workers)
        logging.info("games %s: %d x %s (%s)", name, len(out[name]), spec.name, spec.split)
    out["train"] = out["train"] + out.pop("train_hard")
    return out


def _other_family_sets(c: ml_collections.ConfigDict) -> dict[str, list[Task]]:
    """Task sets of the code-repair ("swe", tier = games.level) and ALFWorld families.

    ALFWorld: ``games.num_*`` games spread over the six task types; the harder split is
    ALFRED's unseen rooms. Code repair: the harder split is the next tier.
    """
    g = c.games
    out: dict[str, list[Task]] = {}
    if c.env.family == "swe":
        from meowjax.envs.swe import tasks as swe_tasks
        plan = {"train": ("train", g.num_train, g.level), "sft": ("sft", g.num_sft, g.level),
                "eval": (g.eval_split, g.num_eval, g.level),
                "eval_hard": (g.eval_split, g.num_eval_hard, _swe_tier(g, True))}
        for name, (split, num, tier) in plan.items():
            folder = os.path.join(g.cache_dir, f"swe-tier{tier}", split)
            out[name] = swe_tasks.generate_tasks(folder, tier, split, num) if num else []
    elif c.env.family == "alfworld":
        from meowjax.envs import alfworld_gen
        plan = {"train": ("train", g.num_train), "sft": ("sft", g.num_sft),
                "eval": (_alfworld_eval_split(g, False), g.num_eval),
                "eval_hard": (_alfworld_eval_split(g, True), g.num_eval_hard)}
        for name, (split, num) in plan.items():
            per_type = -(-num // len(alfworld_gen.TASK_TYPES))
            out[name] = (alfworld_gen.generate_alfworld_games(
                os.path.join(g.cache_dir, "alfworld", split), num_per_type=per_type,
                split=split, num_workers=g.gen_workers, seed=c.seed)[:num] if num else [])
    else:
        raise ValueError(f"env.family={c.env.family!r} has no game sets; use textworld, "
                         "alfworld or swe.")
    for name, tasks in out.items():
        logging.info("tasks %s: %d (%s)", name, len(tasks), c.env.family)
    return out


def expert_data(c: ml_collections.ConfigDict, tasks: list[Task]) -> list[dict[str, Any]]:
    """Replays each game's walkthrough, recording observations and admissible commands.

    Returns per game: objective, observations (t = 0..n), actions (n), rewards (n),
    admissible (the commands admissible before each action).
    """
    env = make_env(env_spec(c, admissible=True))
    out = []
    try:
        for task in tasks:
            reset = env.reset(task, max_turns=10_000)
            obs, adm, acts, rews = [reset.observation], [list(reset.admissible or [])], [], []
            for action in reset.walkthrough or []:
                res = env.step(action)
                acts.append(action)
                rews.append(float(res.reward))
                obs.append(res.observation)
                adm.append(list(res.info.get("admissible") or []))
                if res.done:
                    break
            if not (acts and res.won):  # noqa: F821 (res is bound when acts is non-empty)
                logging.warning("walkthrough of %s does not win; skipped", task.task_id)
                continue
            out.append(dict(objective=reset.objective, observations=obs, actions=acts,
                            rewards=rews, admissible=adm[:len(acts)]))
    finally:
        env.close()
    return out


def game_tokenizer(c: ml_collections.ConfigDict, workdir: str, expert: list[dict[str, Any]]):
    """A BPE tokenizer trained on the expert games' text (saved in workdir/tokenizer, reused)."""
    folder = os.path.join(workdir, "tokenizer")
    if os.path.exists(os.path.join(folder, "tokenizer.json")):
        return tok_lib.load_tokenizer(folder)
    texts = []
    for ex in expert:
        texts.append(ex["objective"])
        texts.extend(ex["observations"])
        texts.extend(cmd for cmds in ex["admissible"] for cmd in cmds)
    texts.append("current state: your action: You are an agent playing a text adventure game.")
    if c.policy.history:
        texts.append(score_episodes.history_line(()))
    return tok_lib.train_bpe_tokenizer(texts, c.model.vocab_size, folder)


# ----- entity-name augmentation (TextWorld) ------------------------------------------------------
# A from-scratch agent trained on a few dozen games memorises their object names instead of
# learning to copy names from the objective into its commands. Swapping every entity name of an
# expert trajectory, consistently, for names drawn from other games (same entity type) forces the
# copy skill. Names come from the game's .json (textworld's `infos`).
_ENTITY_TYPES = ("r", "d", "c", "s", "o", "k", "f")


def entity_names(task: Task) -> dict[str, list[str]]:
    """{entity type: [names]} of one TextWorld game (rooms r, doors d, containers c, ...)."""
    path = os.path.splitext(task.path)[0] + ".json"
    with open(path, encoding="utf-8") as f:
        infos = json.load(f)["infos"]
    out: dict[str, list[str]] = {}
    for _, info in infos:
        if info.get("name") and info.get("type") in _ENTITY_TYPES:
            out.setdefault(info["type"], []).append(info["name"])
    return out


def rename_trajectory(ex: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """The trajectory with every name in ``mapping`` replaced (longest first, one pass)."""
    if not mapping:
        return ex
    keys = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in keys) + r")\b", re.IGNORECASE)

    def sub(text: str) -> str:
        def repl(m):
            new = mapping[m.group(0).lower()] if m.group(0).lower() in mapping else m.group(0)
            return new.capitalize() if m.group(0)[:1].isupper() else new
        return pattern.sub(repl, text)

    return dict(objective=sub(ex["objective"]), observations=[sub(o) for o in ex["observations"]],
                actions=[sub(a) for a in ex["actions"]], rewards=list(ex["rewards"]),
                admissible=[[sub(a) for a in cmds] for cmds in ex["admissible"]])


def augment_experts(expert: list[dict[str, Any]], tasks: list[Task], copies: int,
                    rng: np.random.Generator) -> list[dict[str, Any]]:
    """``copies`` renamed versions of every trajectory, names drawn from all games' pools."""
    if copies <= 0:
        return []
    per_game = [entity_names(t) for t in tasks]
    pool: dict[str, list[str]] = {}
    for names in per_game:
        for kind, ns in names.items():
            pool.setdefault(kind, []).extend(n for n in ns if n not in pool.get(kind, []))
    out = []
    for ex, names in zip(expert, per_game):
        for _ in range(copies):
            mapping, used = {}, set()
            for kind, ns in names.items():
                choices = [n for n in pool[kind] if n not in ns]
                for n in ns:
                    free = [c for c in choices if c not in used]
                    if free:
                        new = free[rng.integers(len(free))]
                        used.add(new)
                        mapping[n.lower()] = new
            out.append(rename_trajectory(ex, mapping))
    return out
