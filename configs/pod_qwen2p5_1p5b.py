"""Qwen2.5-1.5B-Instruct, free-text actions, PPO on TextWorld across a TPU pod (multi-host).

The Practitioner's Guide recipe at pod scale: gamma = lambda = 1, clip 0.2, value clip 0.5,
KL 0.01 in the reward, temperature 0.7 train / 0.4 eval, actor lr 1e-6, critic lr 1e-5. The mesh
spans every host (FSDP over 4 chips, data parallel over the rest); each host plays its own slice
of the game set and all hosts pad to the same (max over hosts) bucket. See experiments/pod.md.

    # on every host of the slice (gcloud ... --worker=all --command=...):
    python -m experiments.launch_pod --config=configs/pod_qwen2p5_1p5b.py --mode=check
    python -m experiments.launch_pod --config=configs/pod_qwen2p5_1p5b.py --mode=train \
        --workdir=/mnt/shared/pod_run
    python -m experiments.launch_pod --config=configs/pod_qwen2p5_1p5b.py:smoke=True --mode=check
"""

import ml_collections

from configs import common


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False, hf_path="/mnt/models/Qwen2.5-1.5B-Instruct",
                           fsdp=0, tensor=1)   # fsdp=0: 4 on the pod, 1 in smoke
    c = common.base_config()
    c.name = "pod_qwen2p5_1p5b"
    c.env.update(dict(reward_mode="dense", num_workers=8))
    c.games.update(dict(num_train=2000, num_sft=200, num_eval=200, num_eval_hard=200,
                        gen_workers=8))
    c.turns.update(dict(max_turns=16, eval_max_turns=16))
    c.model.update(dict(preset="qwen2.5-1.5b", init="hf", hf_path=arg.hf_path))
    c.model.overrides = ml_collections.ConfigDict({"dtype": "bfloat16"}, type_safe=False)
    c.policy.update(dict(interface="generate", temperature=0.7, eval_temperature=0.4,
                         max_action_tokens=32))
    c.rollout.update(dict(length_buckets=(1024, 2048, 3072, 4096), tasks_per_iter=64,
                          group_size=8))
    c.budget.update(dict(total_episodes=64_000, sft_share=0.0))
    # KL in the reward with the k1 estimator (log pi - log pi_ref per token), as in verl.
    c.rl.update(dict(estimator="gae", kl_coef=0.01, kl_in_loss=False, kl_kind="k1",
                     lr=1e-6, critic_lr=1e-5,
                     minibatch_rows=256, epochs=1, warmup_steps=10))
    c.mesh.axes = (("data", -1), ("fsdp", arg.fsdp or 4), ("tensor", arg.tensor))
    # coordinator "auto": Cloud TPU provides address, process count and id to every host.
    c.distributed.coordinator_address = "auto"
    c.pod = ml_collections.ConfigDict(dict(check_batch_rows=256, check_length=4096))
    c.eval.update(dict(num_samples=8, pass_ks=(1, 2, 4, 8), pass_ts=(4, 8, 12, 16)))
    if arg.smoke:   # one CPU process: a tiny model, the same code path
        c.model.update(dict(preset="tiny", init="scratch", hf_path=""))
        c.model.overrides = ml_collections.ConfigDict({}, type_safe=False)
        c.mesh.axes = (("data", -1), ("fsdp", arg.fsdp or 1), ("tensor", arg.tensor))
        c.distributed.coordinator_address = ""
        c.rollout.length_buckets = (128, 256, 512, 1024)   # 1024: whole free-text episodes
        c.pod.update(dict(check_batch_rows=8, check_length=100))
        c.env.num_workers = 0
        c.games.update(dict(num_train=2, num_sft=2, num_eval=2, num_eval_hard=1, gen_workers=1,
                            world_size=1, nb_objects=2, quest_length=2, hard_world_size=1,
                            hard_nb_objects=3, hard_quest_length=3, eval_split="valid"))
        c.eval.update(dict(num_samples=2, pass_ks=(1, 2), pass_ts=(2, 4)))
        c.turns.update(dict(max_turns=4, eval_max_turns=4))
        c.rollout.tasks_per_iter = 2   # of its 2 training games (RL iterations draw distinct ones)
        c.budget.total_episodes = 32   # 2 RL iterations of 2 games x 8 episodes
    c.lock()
    return c
