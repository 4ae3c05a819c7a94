"""ALFWorld: SFT on planner walkthroughs, then RL, on generated games of all six task types.

The agent is the default run's from-scratch scorer of admissible commands (ALFWorld lists them
every turn, as verl-agent's and GiGPO's ALFWorld agents are given them). The demonstrations
are ALFWorld's hand-coded expert's (``games.expert="handcoded"``, envs/alfworld_expert.py): it
checks receptacles in the order of its priors until it finds the object, a search the agent can
imitate in an unseen room, but not the shortest one. The PDDL planner's walkthroughs know where
every object lies and never search. Neither has yet trained an agent that wins: after two SFT
epochs on 120 of either, 0-1 of 30 validation games won per room kind (docs/results-history.md);
the SFT phase is still to be chosen on validation games. Held out: new games in the
training rooms ("seen") and games in rooms no training game uses ("unseen", ALFRED's test
scenes); success is reported by task type.

    python -m experiments.train --config=configs/alfworld.py --workdir=runs/alfworld
    python -m experiments.train --config=configs/alfworld.py:smoke=True --workdir=/tmp/alf
"""

from configs import common, default


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False)
    c = common.base_config()
    c.name = "alfworld"
    c.env.family = "alfworld"
    c.model.update(dict(preset="small", vocab_size=1024))
    c.model.overrides.update(default.MINI)
    c.policy.update(dict(window=0, history=True, max_cands=96, temperature=3.0))
    c.games.update(dict(num_train=192, num_sft=240, num_eval=60, num_eval_hard=60,
                        num_eval_transfer=0, num_curve=0, expert="handcoded"))
    # 240 demonstrations (x 10 units) + 640 RL episodes (20 iterations of 8 tasks x 4).
    c.budget.update(dict(total_episodes=3040, sft_share=2400 / 3040))
    c.sft.update(dict(epochs=2, batch_rows=16, lr=3e-3, lm_coef=1.0))
    c.rollout.update(dict(tasks_per_iter=8, group_size=4, task_order="stream", dynamic_draws=3,
                          length_buckets=(256, 320, 384, 448, 512, 640, 768, 1024)))
    c.env.reward_mode = "sparse"
    c.rl.update(dict(estimator="rloo", epochs=1, minibatch_rows=32, lr=3e-4, warmup_steps=2,
                     lr_schedule="constant", turn_cost=0.01, kl_coef=0.05, kl_kind="k3",
                     kl_in_loss=True, replay_steps=16))
    c.turns.update(dict(max_turns=30, eval_max_turns=30))
    c.eval.update(dict(every_iters=0, num_samples=0, sample_start=False, curve_every=0))
    c.checkpoint.every_iters = 5
    if arg.smoke:
        c.games.update(dict(num_train=6, num_sft=6, num_eval=6, num_eval_hard=6))
        c.budget.update(dict(total_episodes=80, sft_share=0.75))
        c.model.update(dict(preset="tiny", vocab_size=400))
        c.model.overrides = {}
        c.rollout.update(dict(tasks_per_iter=2, group_size=2, task_order="sample",
                              dynamic_draws=0, length_buckets=(512, 1024)))
        c.sft.update(dict(epochs=2, batch_rows=8))
        c.rl.update(dict(minibatch_rows=16, replay_steps=0))
        c.turns.update(dict(max_turns=8, eval_max_turns=8))
        c.checkpoint.every_iters = 2
    c.lock()
    return c
