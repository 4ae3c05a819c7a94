"""Turn-budget study, arm 1: train with one fixed turn budget; evaluate across a grid of budgets.

The other arm is configs/textworld_budgetmix.py (same everything, budgets drawn per episode).
Both evaluate Pass@(K,T) over ``eval.pass_ts`` in single-run mode (the prompt never states the
budget), so one sampled run at T_max gives the whole success-vs-budget curve.

    python -m experiments.train --config=configs/textworld_fixed_budget.py --workdir=runs/fixed

The studies' turn-budget study (``experiments.studies --study=budget``) runs configs/study.py
instead: the default run's recipe at study scale, with BudgetMix and a stated budget as knobs.
"""

from configs import common

# Evaluation grid of turn budgets; w2-o3-q4 walkthroughs take ~4 commands, so the grid spans
# "less than optimal" to ~4x optimal (gains are expected to saturate near 2x).
EVAL_BUDGETS = (2, 4, 6, 8, 12, 16)
SMOKE_EVAL_BUDGETS = (1, 2, 3, 4, 6)


def smoke_overrides(c) -> None:
    """Toy size shared by the study configs: w1-o2-q2 games, a tiny model, a few RL iterations."""
    c.games.update(dict(world_size=1, nb_objects=2, quest_length=2, hard_world_size=1,
                        hard_nb_objects=3, hard_quest_length=3, num_train=2, num_sft=2,
                        num_eval=2, num_eval_hard=1, eval_split="valid"))
    c.budget.update(dict(total_episodes=16, sft_share=0.5))
    c.model.update(dict(preset="tiny", vocab_size=400))
    c.rollout.update(dict(tasks_per_iter=2, group_size=2, length_buckets=(256, 512, 1024)))
    c.sft.update(dict(epochs=2, batch_rows=8))
    c.rl.update(dict(epochs=1, minibatch_rows=8))
    c.eval.update(dict(every_iters=0, num_samples=2, pass_ks=(1, 2)))
    c.checkpoint.every_iters = 2
    c.env.num_workers = 0          # in-process envs: no worker start-up per run


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False, seed=0, max_turns=12)
    c = common.base_config()
    c.name = "textworld_fixed_budget"
    c.policy.window = 2            # the last two turns repeated in each scoring prompt
    c.seed = arg.seed
    c.turns.update(dict(max_turns=arg.max_turns, budget_mix=(), eval_max_turns=max(EVAL_BUDGETS)))
    c.eval.update(dict(pass_ts=EVAL_BUDGETS, num_samples=4, pass_ks=(1, 2, 4)))
    if arg.smoke:
        smoke_overrides(c)
        c.turns.update(dict(max_turns=min(arg.max_turns, 4),
                            eval_max_turns=max(SMOKE_EVAL_BUDGETS)))
        c.eval.pass_ts = SMOKE_EVAL_BUDGETS
    c.lock()
    return c
