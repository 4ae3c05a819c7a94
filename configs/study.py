"""One cell of the studies: the default run's recipe (configs/default.py) at study scale.

experiments/studies.py sweeps these cells over seeds (studies: algos, sft_share, budget) and
writes one JSON per cell under docs/results/ and the document docs/results.md. One cell alone:

    python -m experiments.train --config=configs/study.py:estimator=gae,reward=dense,seed=1 \
        --workdir=runs/study_gae_dense_s1
    python -m experiments.studies --study=algos            # every cell x seeds 0,1,2
    python -m experiments.train --config=configs/study.py:smoke=True --workdir=/tmp/cell

Study scale (what differs from configs/default.py; model, interface, prompt, SFT and RL
hyper-parameters, temperature, KL, reward wrapper and length buckets are the default run's):

  * the default run's SFT (240 demonstrations x 2 epochs, 2 augmented copies each) and 15 RL
    iterations of 8 games x 4 instead of 40: a budget of 2400 + 480 = 2880 episode-units
    (default 3680), SFT share 0.833;
  * the cells of one seed whose SFT is the same (the algos study: every estimator and reward;
    the budget study: the fixed and BudgetMix arms, and the stated arm, whose prompts differ,
    on its own) share ONE SFT run: experiments/studies.py runs it once under
    ``runs/studies/_sft/<key>/`` and starts each cell's RL from its checkpoint
    (meowjax/trainers/shared_sft.py; the key hashes the config fields SFT reads, and a cell
    whose key differs fails). Their budget: same SFT start, RL iterations fixed;
  * the SFT-share study keeps a fixed total budget, the same 2880 episode-units, spent at
    shares 0 .. 1 (0: 90 RL iterations, no SFT; 0.5: 144 demonstrations + 45 iterations; 1: 288
    demonstrations, no RL); each of its cells runs its own SFT;
  * the RL schedule the recorded cells ran with: 64 RL games drawn at random (the default: a
    stream of 320 distinct games), no dynamic sampling, a cosine learning rate, no turn cost;
  * 40 held-out test games per difficulty (default 100), w2-o3-q4 and w3-o5-q6, plus w4-o6-q8
    evaluated by the studies runner (``EXTRA_EVAL``);
  * a greedy held-out evaluation every 5 RL iterations (``eval.every_iters``) for the
    learning curve; sampled evaluation (Pass@(K,T), per-turn diagnostics) at start and end.

Cell time, estimated for 2 quiet cores from the default run's phase times
(docs/results-history.md: SFT 3.0 min for 240 demonstrations x 2 epochs, RL 7.6 min for 40
iterations (~11 s each), ~0.6 min per evaluation of twice these games): the shared SFT ~3.5 min
once per seed (and key), then per cell: start-up (games, expert data, rows) ~0.5 min, RL ~2.8
min, evaluations (start, two periodic, final, the runner's w4-o6-q8) ~1 min: ~4.3 min, the
algos study ~70 min per seed (15 cells + one SFT). Budget cells cost ~6 min more (Pass@(K,T) from
4 sampled episodes a game, the stated mode played at every T). SFT-share cells cost more: ~55
min per seed for the five (224 RL iterations and 720 demonstrations between them). On the 2
cores shared with other jobs (load average 6-16), cells of the earlier, smaller scale took 2-4x
their quiet estimate. Measured times: docs/results.md lists every cell's wall time and load
(only cells of this scale: those of the earlier one were removed, not mixed in).

Knobs: ``estimator`` (gae = PPO with a critic and token GAE, turn_gae, grpo, rloo, gigpo),
``reward`` (sparse = win, dense = score gained per turn, process = expert-plan progress),
``sft_share`` (negative: the study's default share), ``budget_mix`` (turn budgets separated by
``/``, each RL episode's budget drawn from them; empty: a fixed budget of 12), ``state_budget``
(every prompt states the turns left), ``passkt_grid`` (the turn-budget study's Pass@(K,T) grid,
K 1,2,4 x T 2..12, from 4 sampled episodes a game), ``seed``, ``smoke`` (toy size, seconds).
"""

from configs import common
from configs import default

ESTIMATORS = ("gae", "turn_gae", "grpo", "rloo", "gigpo")
REWARDS = ("sparse", "dense", "process")
SFT_DEMOS = 240                 # the default run's (configs/default.py games.num_sft)
RL_ITERS = 15                   # of 8 games x 4 episodes
TOTAL_EPISODES = SFT_DEMOS * 10 + RL_ITERS * 8 * 4      # 2880 episode-units
SFT_SHARE = SFT_DEMOS * 10 / TOTAL_EPISODES
EVAL_GAMES = 40
STUDY_RL_GAMES = 64             # the RL pool, games drawn at random (repeats allowed)
# The turn-budget study's grid (w2-o3-q4 walkthroughs take ~4 commands: "less than optimal"
# up to ~3x optimal).
GRID_KS, GRID_TS = (1, 2, 4), (2, 3, 4, 6, 8, 12)
# A third, harder held-out difficulty, evaluated greedily by the studies runner at the start and
# the end of RL (the Practitioner's Guide's w4-o6-q8; the trainer evaluates two difficulties).
# Its 60 test games were generated in 334 s on the 2 shared cores (walkthroughs of 7-8 commands).
EXTRA_EVAL = "w4-o6-q8"
SMOKE_EXTRA_EVAL = "w1-o3-q3"


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
    share = SFT_SHARE if arg.sft_share < 0 else arg.sft_share
    if share > 1:
        raise ValueError(f"sft_share={arg.sft_share} must be in [0, 1] (negative: the study's "
                         f"default {SFT_SHARE:.3f}).")
    mix = parse_mix(arg.budget_mix)
    c = default.get_config(f"smoke={arg.smoke}")
    c.unlock()
    # The RL schedule the committed cells ran with (the default run's before its stream of
    # distinct games, dynamic sampling, constant learning rate and turn cost).
    c.rollout.update(dict(task_order="sample", dynamic_draws=0))
    c.rl.update(dict(lr_schedule="cosine", turn_cost=0.0))
    # ... and the design they ran in: RL on the base difficulty only, a KL anchor of 0.01,
    # Pass@(K,T) and diagnostics at the base difficulty, no transfer set or learning curve of
    # the trainer's own (a study evaluates its own harder games and curve).
    c.games.update(dict(num_train_hard=0, num_eval_transfer=0, num_curve=0))
    c.rl.kl_coef = 0.01
    c.eval.update(dict(sampled_split="eval", sampled_games=0, curve_every=0))
    if not arg.smoke:
        c.games.num_train = STUDY_RL_GAMES
    c.name = (f"study_{arg.estimator}_{arg.reward}_sft{share:.3g}"
              + (f"_mix{arg.budget_mix.replace('/', '-')}" if mix else "")
              + ("_stated" if arg.state_budget else ""))
    c.seed = arg.seed
    c.rl.estimator = arg.estimator
    c.env.reward_mode = arg.reward
    c.policy.state_budget = arg.state_budget
    if not arg.smoke:
        c.budget.update(dict(total_episodes=TOTAL_EPISODES, sft_share=share))
        # The default's 240 SFT games unless the share needs more (share 1: 288).
        demos = int(round(share * TOTAL_EPISODES / c.budget.sft_demo_cost))
        c.games.update(dict(num_sft=max(c.games.num_sft, demos), num_eval=EVAL_GAMES,
                            num_eval_hard=EVAL_GAMES))
    else:
        c.budget.sft_share = share
        c.games.num_sft = max(c.games.num_sft, int(round(share * c.budget.total_episodes
                                                         / c.budget.sft_demo_cost)))
    if mix:
        if arg.smoke:               # the smoke run's budget (6) caps the mix
            mix = tuple(sorted({min(b, c.turns.max_turns) for b in mix}))
        c.turns.update(dict(budget_mix=mix, max_turns=max(mix)))
    if arg.passkt_grid:
        ks, ts = (GRID_KS, GRID_TS) if not arg.smoke else ((1, 2), (2, 4, 6))
        c.eval.update(dict(num_samples=max(ks), pass_ks=ks, pass_ts=ts))
        c.turns.eval_max_turns = max(ts)
    iters = rl_iterations(c)
    c.eval.every_iters = -(-iters // 3) if iters >= 3 else 0
    c.lock()
    return c
