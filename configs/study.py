"""One cell of the studies: the default run's recipe (configs/default.py), RL phase and all.

experiments/studies/ sweeps these cells over seeds and writes one JSON per cell under
docs/results/<study>/ and the document docs/results.md. One cell alone:

    python -m experiments.train --config=configs/study.py:estimator=grpo,reward=sparse,seed=1 \
        --workdir=runs/study_grpo_sparse_s1
    python -m experiments.studies --study=algos --plan     # cells, CPU time, detectable effect
    python -m experiments.train --config=configs/study.py:smoke=True --workdir=/tmp/cell

Study scale = the default run's RL phase, where RL moves held-out success (five test seeds:
+0.131 at the RL difficulty, every interval above zero; docs/results/default/summary.json): its SFT (240 base-difficulty demonstrations), its 20 RL
iterations on a stream of 160 distinct games, three quarters of them of the harder w3-o5-q6,
its schedule (turn cost, dynamic sampling, constant lr, KL anchor, demonstration replay) and
its learning curve. What differs: 200 held-out test
games at each of the three difficulties (base w2-o3-q4, RL w3-o5-q6, transfer w4-o6-q8; the
default holds 100 at the base and transfer ones), and the knobs below.

The cells of one seed whose SFT is the same (every estimator and reward; the turn-budget arms
whose prompts do not state the budget) share ONE SFT run: the studies runner runs it once
under ``runs/studies/_sft/<key>/`` and starts each cell's RL from its checkpoint
(meowjax/trainers/shared_sft.py; the key hashes the config fields SFT reads).

Knobs: ``estimator`` (gae = PPO with a critic and token GAE, turn_gae, grpo, rloo, gigpo),
``reward`` (sparse = win, dense = score gained per turn, process = expert-plan progress; the
default's), ``sft_share`` (negative: the default's), ``budget_mix`` (turn budgets separated by
``/``, each RL episode's budget drawn from them; empty: a fixed budget of 12), ``state_budget``
(every prompt states the turns left), ``passkt_grid`` (the turn-budget study's Pass@(K,T) grid,
K 1,2,4,8 x T 2..12, from 8 sampled episodes on 100 games), ``seed``, ``smoke`` (toy size).
"""

from configs import common
from configs import default

ESTIMATORS = ("gae", "turn_gae", "grpo", "rloo", "gigpo")
REWARDS = ("sparse", "dense", "process")
EVAL_GAMES = 200                # held-out test games per difficulty
# The turn-budget study's grid: Pass@(K,T) from 8 sampled episodes on 100 games of the RL
# difficulty (a w3-o5-q6 walkthrough takes ~6 commands: T 2 .. 12 is "less than optimal" up to
# twice optimal).
GRID_KS, GRID_TS, GRID_GAMES = (1, 2, 4, 8), (2, 4, 6, 8, 10, 12), 100


def parse_mix(text: str) -> tuple[int, ...]:
    """``"2/4/8"`` -> (2, 4, 8); "" -> () (a fixed budget)."""
    try:
        mix = tuple(int(x) for x in text.split("/") if x)
    except ValueError:
        mix = (0,)
    if mix and min(mix) < 1:
        raise ValueError(f"budget_mix={text!r}: give positive turn budgets separated by '/', "
                         "e.g. 2/4/8/12, or leave it empty for a fixed budget.")
    return mix


def rl_iterations(c) -> int:
    """RL iterations of the plan (trainers.data.budget_plan's count over one iteration's
    episodes): the learning curve's evaluation interval is cut from it."""
    rl_episodes = int(round((1 - c.budget.sft_share) * c.budget.total_episodes))
    return rl_episodes // (c.rollout.tasks_per_iter * c.rollout.group_size)


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False, seed=0, estimator="rloo", reward="process",
                           sft_share=-1.0, budget_mix="", state_budget=False, passkt_grid=False)
    if arg.estimator not in ESTIMATORS:
        raise ValueError(f"estimator={arg.estimator!r}; choose one of {ESTIMATORS}.")
    if arg.reward not in REWARDS:
        raise ValueError(f"reward={arg.reward!r}; choose one of {REWARDS}.")
    if arg.sft_share > 1:
        raise ValueError(f"sft_share={arg.sft_share} must be in [0, 1] (negative: the default "
                         "run's share).")
    mix = parse_mix(arg.budget_mix)
    c = default.get_config(f"smoke={arg.smoke}")
    c.unlock()
    share = c.budget.sft_share if arg.sft_share < 0 else arg.sft_share
    c.name = (f"study_{arg.estimator}_{arg.reward}_sft{share:.3g}"
              + (f"_mix{arg.budget_mix.replace('/', '-')}" if mix else "")
              + ("_stated" if arg.state_budget else ""))
    c.seed = arg.seed
    c.rl.estimator = arg.estimator
    c.env.reward_mode = arg.reward
    c.policy.state_budget = arg.state_budget
    # The default's demonstrations unless the share asks for more.
    demos = int(round(share * c.budget.total_episodes / c.budget.sft_demo_cost))
    c.budget.sft_share = share
    c.games.num_sft = max(c.games.num_sft, demos)
    if not arg.smoke:
        c.games.update(dict(num_eval=EVAL_GAMES, num_eval_hard=EVAL_GAMES,
                            num_eval_transfer=EVAL_GAMES))
    if mix:
        if arg.smoke:               # the smoke run's budget (6) caps the mix
            mix = tuple(sorted({min(b, c.turns.max_turns) for b in mix}))
        c.turns.update(dict(budget_mix=mix, max_turns=max(mix)))
    if arg.passkt_grid:
        ks, ts = (GRID_KS, GRID_TS) if not arg.smoke else ((1, 2), (2, 4, 6))
        c.eval.update(dict(num_samples=max(ks), pass_ks=ks, pass_ts=ts))
        if not arg.smoke:
            c.eval.sampled_games = GRID_GAMES
        c.turns.eval_max_turns = max(ts)
    c.lock()
    return c
