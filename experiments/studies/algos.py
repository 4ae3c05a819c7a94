"""Q1 algorithm x reward, read also for Q4 (where RL's gain sits), Q5 (transfer) and Q6
(process supervision): the critic-free estimators x the sparse and the process reward.

Not yet arms: PPO with a critic (gae, turn_gae), until its critic warm-up
(``rl.critic_warmup_iters``) and learning rate are chosen on validation games (a cold head
starts at zero); and "dense", which equals "sparse" on these games (tw-make custom
quests pay their score at the win) until games that pay along the way are generated.
"""

from meowjax.eval.study_spec import Claim, Comparison, Study, arms

ESTIMATORS = ("rloo", "grpo", "gigpo")
REWARDS = ("process", "sparse")
GUIDE = "DESIGN.md, the Practitioner's Guide's findings"
SECOND = "the second paper, as the project's mission states it"
RLOO_OVER_GRPO = Claim("PPO ≥ RLOO > GRPO on harder games for small models", GUIDE, +1)
GIGPO = Claim("GiGPO (Feng et al. 2025), ALFWorld, Qwen2.5-1.5B, group size 8, 50 turns: PPO "
              "54.4, RLOO 69.7, GRPO 72.8, GiGPO 86.7", "DESIGN.md, figures peers report", +1)
PROCESS = Claim("process supervision", SECOND, None)
RECOVERY = Claim("RL gains need enough turns and sit in error recovery", SECOND, None)
TRANSFER = None   # no sentence of the seed documents states a direction for difficulty transfer


def _cmps():
    out = []
    for r in REWARDS:
        out += [Comparison("success", f"rloo / {r}", f"grpo / {r}", "hard", RLOO_OVER_GRPO),
                Comparison("success", f"gigpo / {r}", f"grpo / {r}", "hard", GIGPO),
                Comparison("success", f"gigpo / {r}", f"rloo / {r}", "hard", GIGPO)]
    for e in ESTIMATORS:       # Q6: process vs outcome reward, gain and learning speed
        out += [Comparison("success", f"{e} / process", f"{e} / sparse", "hard", PROCESS),
                Comparison("auc", f"{e} / process", f"{e} / sparse", "hard", PROCESS)]
    for e in ESTIMATORS:       # Q4: first action vs recovery, Q5: transfer
        arm = f"{e} / process"
        out += [Comparison("success", arm, None, "hard", RECOVERY),
                Comparison("probe", arm, None, "hard", RECOVERY),
                Comparison("diag:recovery_no_progress", arm, None, "hard", RECOVERY),
                Comparison("diag:first_action_progress", arm, None, "hard", RECOVERY),
                Comparison("success", arm, None, "harder", TRANSFER)]
    return tuple(out)


STUDY = Study(
    name="algos", question="Q1 algorithms x reward (and Q4 where the gain sits, Q5 transfer, "
    "Q6 process supervision)",
    arms=arms([(f"{e} / {r}", {"estimator": e, "reward": r})
               for r in REWARDS for e in ESTIMATORS]),
    comparisons=_cmps(),
    # Q4's selection-free probe: the second command of every sampled game forced to a wasted
    # "inventory" (the next prompt shows the inventory, not the room), then greedy play.
    probe=(1, "inventory"))
