"""Algorithm x reward density x SFT share study (the Practitioner's Guide comparison, small scale).

One cell = one run: ``estimator`` (gae = PPO with a critic, grpo, rloo), ``reward`` (sparse =
outcome only, dense = score delta, process = expert-plan progress from
meowjax/envs/process_reward.py, the reward wrapper ``trainers.data.env_spec`` puts around the
family for ``env.reward_mode="process"``), ``sft_share`` of the episode budget spent on SFT
demonstrations, ``seed``. experiments/studies.py sweeps the cells and writes the comparison.

    python -m experiments.train --config=configs/study_algos.py:estimator=gae,reward=dense \
        --workdir=runs/algos/gae_dense
    python -m experiments.studies --study=algos --workdir=runs/algos_study
    python -m experiments.studies --study=algos --smoke --workdir=/tmp/algos_smoke
"""

from configs import common
from configs import textworld_fixed_budget as fixed

ESTIMATORS = ("gae", "grpo", "rloo")
REWARDS = ("sparse", "dense", "process")


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False, seed=0, estimator="rloo", reward="sparse",
                           sft_share=0.25)
    if arg.estimator not in ESTIMATORS:
        raise ValueError(f"estimator={arg.estimator!r}; choose one of {ESTIMATORS}.")
    if arg.reward not in REWARDS:
        raise ValueError(f"reward={arg.reward!r}; choose one of {REWARDS}.")
    c = common.base_config()
    c.name = f"study_algos_{arg.estimator}_{arg.reward}_sft{arg.sft_share:g}"
    c.seed = arg.seed
    c.rl.estimator = arg.estimator
    c.policy.window = 2            # the last two turns repeated in each scoring prompt
    c.env.reward_mode = arg.reward
    c.budget.sft_share = arg.sft_share
    c.games.num_sft = max(c.games.num_sft, int(round(
        arg.sft_share * c.budget.total_episodes / c.budget.sft_demo_cost)))
    if arg.smoke:
        fixed.smoke_overrides(c)
        c.budget.sft_share = arg.sft_share
        c.games.num_sft = max(2, int(round(arg.sft_share * c.budget.total_episodes
                                           / c.budget.sft_demo_cost)))
        c.turns.update(dict(max_turns=4, eval_max_turns=4))
        c.eval.pass_ts = (2, 4)
    c.lock()
    return c
