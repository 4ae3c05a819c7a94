"""The default main job: what RL adds where the demonstrations stop, on a 2-core CPU.

A from-scratch agent (the LM scores the game's admissible commands, GLAM-style) learns TextWorld
from expert walkthroughs of the base difficulty (w2-o3-q4, with entity-name augmentation), then
RLOO trains it for 20 iterations on a stream of distinct games, three quarters of them of a
harder difficulty the demonstrations never show (w3-o5-q6; longer quests, more rooms and
objects) and a quarter of the base one (so that it keeps what SFT taught), with a cost per turn,
dynamic sampling, a constant learning rate and a KL anchor to the SFT policy. Greedy success is
evaluated before and after RL on held-out games of the base difficulty, of the RL difficulty, and
of a harder one no phase trains on (w4-o6-q8, transfer); Pass@(K,T) and the per-turn diagnostics
come from sampled episodes at the RL difficulty; during RL a fixed set of held-out validation
games of the RL difficulty draws the learning curve. docs/results-history.md holds the measured
runs.

    python -m experiments.train --config=configs/default.py --workdir=runs/default
    python -m experiments.train --config=configs/default.py:smoke=True --workdir=/tmp/smoke
"""

from configs import common

# A ~0.6M-parameter decoder (plus a 1024 x 128 tied embedding): what 2 CPU cores train on
# ~300-token rows in minutes. scan_unroll=3: all layers in one scan step, same math, faster
# (benchmarks/score_step.py). Why each setting below: docs/results-history.md, "Why the
# default run's settings", and the entries it names.
MINI = dict(hidden_size=128, intermediate_size=384, num_layers=3, num_heads=4, num_kv_heads=2,
            head_dim=32, scan_unroll=3)


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False)
    c = common.base_config()
    c.name = "default"
    c.model.update(dict(preset="small", vocab_size=1024))
    c.model.overrides.update(MINI)
    # The prompt: no past turns (window=0) but the episode's actions so far (history).
    # temperature 3 for RL's sampling and training policy: at 1 the SFT policy is near-
    # deterministic and a group's episodes mostly identical (evaluation is greedy either way).
    c.policy.update(dict(window=0, history=True, max_cands=48, temperature=3.0))
    # SFT on 240 base games; RL on a stream of 160 distinct games (none repeated: RL on a few
    # games played again and again fits them), three quarters of the harder w3-o5-q6, for 20
    # iterations. Held out: 100 base and 100 transfer games, 200 at the RL difficulty (its
    # paired interval must clear zero at every seed); Pass@(K,T) samples the first 100; 48
    # learning-curve games, one greedy pass every eval.curve_every iterations.
    c.games.update(dict(num_train=40, num_train_hard=120, num_sft=240, num_eval=100,
                        num_eval_hard=200, num_eval_transfer=100, num_curve=48,
                        hard_world_size=3, hard_nb_objects=5, hard_quest_length=6,
                        transfer_world_size=4, transfer_nb_objects=6, transfer_quest_length=8))
    # 3040 episode-units: 240 demonstrations (x 10 units each) + 640 RL episodes (20 iterations).
    c.budget.update(dict(total_episodes=3040, sft_share=2400 / 3040))
    # lm_coef: the auxiliary next-token loss on the prompt (objective + observations).
    c.sft.update(dict(epochs=2, batch_rows=16, lr=3e-3, augment_copies=2, lm_coef=1.0))
    # Length buckets fitted to this run's turn rows (benchmarks/padding.py). dynamic_draws=3:
    # the update keeps the groups whose returns differ and draws more games to fill 8.
    c.rollout.update(dict(tasks_per_iter=8, group_size=4, task_order="stream", dynamic_draws=3,
                          length_buckets=(224, 256, 288, 320, 384, 448, 512, 768)))
    # Process reward (expert-plan progress, potential-based) and a cost of 0.02 per turn: with
    # gamma = 1 the telescoping process reward makes an undo-redo detour free, the turn cost
    # makes it cost. RLOO (no critic), constant lr, a KL anchor (k3, in the loss) to the SFT
    # policy, and 16 replayed demonstration minibatches after each iteration's update: while
    # most RL games are harder, they keep the base difficulty (replay: +0.057 at the base,
    # -0.010 at the RL difficulty, three validation seeds; docs/results-history.md).
    c.env.reward_mode = "process"
    c.rl.update(dict(estimator="rloo", epochs=1, minibatch_rows=32, lr=3e-4, warmup_steps=2,
                     lr_schedule="constant", turn_cost=0.02,
                     kl_coef=0.05, kl_kind="k3", kl_in_loss=True, replay_steps=16))
    c.turns.update(dict(max_turns=12, eval_max_turns=12))
    c.eval.update(dict(every_iters=0, num_samples=2, sample_start=True, pass_ks=(1, 2),
                       pass_ts=(4, 6, 8, 12), sampled_split="eval_hard", sampled_games=100,
                       curve_every=5))
    c.checkpoint.every_iters = 5
    if arg.smoke:
        c.games.update(dict(num_train=4, num_train_hard=0, num_sft=3, num_eval=3,
                            num_eval_hard=2, num_eval_transfer=2, num_curve=2,
                            hard_world_size=2, hard_nb_objects=4, hard_quest_length=5,
                            transfer_world_size=2, transfer_nb_objects=3,
                            transfer_quest_length=5))
        c.budget.update(dict(total_episodes=40, sft_share=0.5))
        c.model.update(dict(preset="tiny", vocab_size=400))
        c.model.overrides = {}
        # The toy run keeps the base RL schedule (games drawn at random, no extra draws, cosine
        # lr, no turn cost): the tests built on it count its iterations and draws.
        c.rollout.update(dict(tasks_per_iter=2, group_size=2, length_buckets=(256, 512, 1024),
                              task_order="sample", dynamic_draws=0))
        c.sft.update(dict(epochs=2, batch_rows=8, augment_copies=1))
        # No replay: the toy runs have a handful of demonstration rows (the default smoke test
        # turns it on).
        c.rl.update(dict(epochs=1, minibatch_rows=16, lr_schedule="cosine", turn_cost=0.0,
                         replay_steps=0))
        c.turns.update(dict(max_turns=6, eval_max_turns=6))
        c.eval.update(dict(every_iters=0, num_samples=2, pass_ks=(1, 2), pass_ts=(2, 4, 6),
                           sampled_games=0, curve_every=2))
        c.checkpoint.every_iters = 2
    c.lock()
    return c
