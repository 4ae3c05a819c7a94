"""The default main job: a from-scratch agent learns TextWorld w2-o3-q4 games on a 2-core CPU.

Interface: the LM scores the game's admissible commands (GLAM-style; see README for why), a
small SFT prior on expert walkthroughs, then RLOO policy-gradient RL on groups of episodes;
evaluated on held-out games of the training difficulty and a harder one.

    python -m experiments.train --config=configs/default.py --workdir=runs/default
    python -m experiments.train --config=configs/default.py:smoke=True --workdir=/tmp/smoke
"""

from configs import common


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False)
    c = common.base_config()
    c.name = "default"
    if arg.smoke:
        c.games.update(dict(num_train=4, num_sft=3, num_eval=3, num_eval_hard=2,
                            hard_world_size=2, hard_nb_objects=4, hard_quest_length=5))
        c.budget.update(dict(total_episodes=40, sft_share=0.5))
        c.model.update(dict(preset="tiny", vocab_size=400))
        c.rollout.update(dict(tasks_per_iter=2, group_size=2))
        c.sft.update(dict(epochs=2, batch_rows=8))
        c.rl.update(dict(epochs=1, minibatch_rows=16))
        c.turns.update(dict(max_turns=6, eval_max_turns=6))
        c.eval.update(dict(every_iters=0, num_samples=2, pass_ks=(1, 2), pass_ts=(2, 4, 6)))
        c.checkpoint.every_iters = 2
    c.lock()
    return c
