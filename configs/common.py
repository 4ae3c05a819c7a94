"""Shared config pieces. Every experiment is one file with ``get_config(arg)``.

``arg`` is a comma-separated list of ``key=value`` overrides of the experiment's own switches,
e.g. ``--config=configs/default.py:smoke=True``. Fields are then overridable with absl flags:
``--config.rl.kl_coef=0.05``. Configs are locked: a typo'd field fails naming it.
"""

from __future__ import annotations

import ml_collections
from ml_collections.config_dict import placeholder

from meowjax import rl


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
    """Parses ``"a=1,b=x"`` into a ConfigDict over ``defaults`` (types follow the defaults)."""
    out = ml_collections.ConfigDict(defaults)
    if not arg:
        return out
    for item in arg.split(","):
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"Config arg {item!r} is not key=value; known keys: {sorted(defaults)}.")
        key, value = item.split("=", 1)
        if key not in defaults:
            raise ValueError(f"Unknown config arg {key!r}; known keys: {sorted(defaults)}.")
        kind = type(defaults[key])
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"Config arg {key}={value!r} must be true or false.")
            out[key] = value.lower() in ("true", "1")
        else:
            out[key] = kind(value)
    return out


def base_config() -> ml_collections.ConfigDict:
    """All fields a training run reads, with the CPU-scale defaults; experiments override."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.name = "base"
    # Plugins: comma-separated modules imported before the run is built, e.g.
    # --config.imports=my_pkg.my_estimator; they register estimators, env families and policy
    # interfaces by name (meowjax.runtime.plugins), which the config then names.
    c.imports = ""

    # Environment and game sets. Difficulty names follow w{world}-o{objects}-q{quest}.
    # The RL pool: num_train games of the training difficulty + num_train_hard of the harder one.
    # num_eval_transfer: held-out games of a third difficulty (transfer_*) that no phase trains
    # on. num_curve: validation games of the harder difficulty played greedily during RL every
    # eval.curve_every iterations (the held-out learning curve; TextWorld). expert: where the
    # SFT demonstrations come from, one of the family's sources ("planner": each game's recorded
    # walkthrough; ALFWorld also "handcoded": ALFWorld's searching expert, envs.alfworld_expert).
    # sandbox (code repair only): how model-written code runs. "namespaces" isolates it (own
    # user/mount/PID/network namespaces; the run refuses to start where they are unavailable);
    # "best_effort" runs it as this user with process limits only: trusted code only.
    c.env = ml_collections.ConfigDict(dict(
        family="textworld", reward_mode="sparse", invalid_action_penalty=0.0, compact=True,
        num_workers=2, step_timeout_s=30.0, sandbox="namespaces"))
    c.games = ml_collections.ConfigDict(dict(
        cache_dir="data/games", kind="custom", world_size=2, nb_objects=3, quest_length=4,
        level=1, num_train=100, num_sft=60, num_eval=40, eval_split="test",
        hard_world_size=3, hard_nb_objects=5, hard_quest_length=6, num_eval_hard=40,
        num_train_hard=0, gen_workers=2, transfer_world_size=4, transfer_nb_objects=6,
        transfer_quest_length=8, num_eval_transfer=0, num_curve=0, expert="planner"))
    # Turn budgets. budget_mix: if non-empty, each training episode's budget is drawn from it.
    c.turns = ml_collections.ConfigDict(dict(max_turns=12, budget_mix=(), eval_max_turns=12))

    # Model: a preset name (trained from scratch with a BPE tokenizer trained on game text), or
    # a local Hugging Face folder / "smollm2" for the GGUF import.
    c.model = ml_collections.ConfigDict(dict(
        preset="small", init="scratch", hf_path="", vocab_size=1024, overrides={}))
    c.model.overrides = ml_collections.ConfigDict({}, type_safe=False)

    # Policy interface: "score" (LM scores admissible commands) or "generate" (free text).
    # window (score interface, required there): past turns repeated in the prompt; the free-text
    # interface keeps the whole episode in its context (up to max(rollout.length_buckets)
    # tokens) and refuses a window. history (score interface): the last observation is prefixed
    # with "Actions so far: ...". eval_temperature: sampled evaluation episodes (Pass@(K,T));
    # unset = the training temperature; greedy evaluation ignores both. state_budget (score
    # interface): each prompt states the turns left of the episode's budget ("Turns left: 3 of
    # 8"); off, no prompt states the budget (what single-run Pass@(K,T) needs).
    c.policy = ml_collections.ConfigDict(dict(
        interface="score", window=placeholder(int), history=False, state_budget=False,
        max_cands=48,
        score_norm="sum", temperature=1.0, eval_temperature=placeholder(float),
        max_action_tokens=12))
    # rollout.task_order: "stream" walks seeded permutations of the RL pool (no task repeats
    # until the pool is used up; games.num_train >= iterations * tasks_per_iter: none in the
    # run), "sample" draws each iteration's tasks independently (repeats at random).
    # rollout.rename_prob: the share of RL tasks played with fresh entity names (TextWorld: the
    # game is unchanged, the agent reads and writes other names; see textworld_augment).
    # rollout.kv_reuse (free-text interface): each episode keeps its KV cache across turns and a
    # turn prefills only the environment's reply (linear in turns); False re-prefills the whole
    # conversation every turn (quadratic). Both draw the same tokens (meowjax.rollout.episodes).
    # rollout.dynamic_draws (DAPO's dynamic sampling; 0 = off): the RL update keeps only groups
    # whose returns differ (a group baseline gives the others zero advantage) and plays up to
    # this many extra sets of tasks_per_iter random pool tasks to fill tasks_per_iter such
    # groups (meowjax.trainers.dynamic_sampling).
    # rollout.greedy_member: each group gets one more episode, its task played greedily (arg-max
    # action every turn, as held-out evaluation plays), trained on like the sampled ones: where
    # the greedy episode loops and fails while sampled ones win, its actions get a negative
    # advantage (an off-policy sample: its log-probs are those of the sampling policy).
    c.rollout = ml_collections.ConfigDict(dict(
        length_buckets=(256, 384, 512, 768, 1024), tasks_per_iter=8, group_size=4,
        task_order="sample", rename_prob=0.0, kv_reuse=True, dynamic_draws=0,
        greedy_member=False))

    # SFT -> RL under one budget: an SFT demonstration costs sft_demo_cost RL episodes.
    # sft.lm_coef / rl.lm_coef: weight of an auxiliary next-token loss on the prompt text
    # (objective, observations). lr_schedule: "cosine" (warmup, then decay to 10% of lr at the
    # section's estimated step count) or "constant" (warmup, then lr).
    # sft.augment_copies: extra copies of each demonstration with entity names swapped for
    # names from other games (teaches copying names from the objective; TextWorld only).
    c.budget = ml_collections.ConfigDict(dict(total_episodes=1200, sft_share=0.25,
                                              sft_demo_cost=10))
    c.sft = ml_collections.ConfigDict(dict(
        epochs=6, batch_rows=32, lr=1e-3, lr_schedule="cosine", warmup_steps=20, grad_clip=1.0,
        weight_decay=0.0, augment_copies=0, lm_coef=0.0))
    # The objective (meowjax.rl.objective): the policy loss policy_loss (registered by name in
    # meowjax.rl.policy_losses: "ppo_clip", "cispo"), its clip (clip_eps_high / dual_clip /
    # value_clip: 0 = off), KL to the SFT policy in the loss or folded into the rewards
    # (kl_in_loss, with kl_kind's estimator either way), entropy bonus, auxiliary LM loss,
    # aggregation `agg` (one of meowjax.rl.AGG_MODES). Each advantage estimator reads the shared
    # gamma / lam plus its own section rl.<estimator> (e.g. rl.grpo.use_std,
    # rl.gigpo.step_weight), whose fields and defaults come from the estimator registry.
    # loss_norm: "iteration" divides every update step of an RL iteration by the same number (a
    # full minibatch's worth of units), so the small last minibatch of an epoch weighs each row
    # like the rest; "minibatch": by its own count.
    # turn_cost: subtracted from the reward of every agent turn (detours cost; with gamma = 1
    # and a telescoping process reward they are free). bootstrap_truncated: the critic
    # estimators continue an episode cut by its turn budget from the critic's value instead of
    # 0 (meowjax.trainers.returns); episodes that ended are unaffected.
    # tis: token-level truncated importance sampling between sampler and trainer: pi_old of the
    # PPO ratio is the trainer's own recomputation, each unit weighted by min(pi_old/mu, tis_cap)
    # ("truncate") or 1 inside the ratio band tis_band, else 0 ("mask"); "auto" = "truncate" for a
    # bf16 model, "off" in fp32.
    # replay_steps: after each RL iteration's update, that many SFT steps (the SFT loss, with
    # sft.lm_coef) on sft.batch_rows demonstration rows drawn afresh, through the RL optimizer:
    # the demonstrations keep pulling while RL plays games they do not cover (PPO-ptx's
    # pretraining mix, as separate steps so that no update batch changes shape). 0 = off.
    c.rl = ml_collections.ConfigDict(dict(
        estimator="rloo", gamma=1.0, lam=1.0, whiten_advantages=False, agg="token_mean",
        loss_norm="iteration", turn_cost=0.0, bootstrap_truncated=True,
        policy_loss="ppo_clip", clip_eps=0.2, clip_eps_high=0.0, dual_clip=0.0, value_clip=0.5,
        kl_coef=0.0, kl_kind="k3", kl_in_loss=True, entropy_coef=0.0,
        tis="auto", tis_cap=2.0, tis_band=(0.5, 2.0),
        epochs=2, minibatch_rows=32, lr=3e-4, lr_schedule="cosine", critic_lr=1e-3,
        warmup_steps=5, grad_clip=1.0,
        weight_decay=0.0, lm_coef=0.0, replay_steps=0, critic_warmup_iters=0))
    for name, spec in rl.ESTIMATORS.items():
        if spec.defaults:
            c.rl[name] = ml_collections.ConfigDict(dict(spec.defaults))

    c.mesh = ml_collections.ConfigDict(dict(axes=(("data", -1), ("fsdp", 1), ("tensor", 1))))
    # Training across processes (meowjax.runtime.multihost; README "Scaling out"): every process
    # runs the same command with its own process_id; coordinator_address "host:port" of process
    # 0, or "auto" where jax.distributed.initialize() finds them (Cloud TPU, SLURM); "" = one
    # process. heartbeat_timeout_s: how long the others wait on a dead process before stopping.
    c.distributed = ml_collections.ConfigDict(dict(
        coordinator_address="", num_processes=1, process_id=0, local_device_ids=None,
        heartbeat_timeout_s=100), type_safe=False)
    # Greedy success on both held-out splits at the start of RL and at the end; Pass@(K,T) from
    # num_samples sampled episodes per game at the end (and at the start if sample_start).
    # sampled_split: the held-out set whose sampled episodes give Pass@(K,T) and the per-turn
    # diagnostics ("eval" or "eval_hard"); sampled_games: how many of its games (the first
    # ones) are sampled (0 = all of them). curve_every: RL iterations between two points of the
    # held-out learning curve on games.num_curve games (0 = no curve).
    c.eval = ml_collections.ConfigDict(dict(every_iters=10, num_samples=4, sample_start=True,
                                            pass_ks=(1, 2, 4), pass_ts=(4, 6, 8, 12),
                                            sampled_split="eval", sampled_games=0,
                                            curve_every=0))
    c.checkpoint = ml_collections.ConfigDict(dict(every_iters=10, max_to_keep=2))
    c.log = ml_collections.ConfigDict(dict(every_steps=1))
    return c
