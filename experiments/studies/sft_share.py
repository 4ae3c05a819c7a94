"""Q2 the SFT:RL split at a fixed budget of episode-units (a demonstration costs
``budget.sft_demo_cost`` RL episodes): these are the earlier schedule's shares, from pure RL
(a reference line, not the comparison) to SFT alone. To be redesigned before it runs: an
interior grid of shares at two budgets, with the budget unit justified (environment turns or
measured compute) and the exchange rate's sensitivity shown.
"""

from meowjax.eval.study_spec import Claim, Comparison, Study, arms

PRIOR = Claim("a small SFT prior before RL beats pure RL at a fixed budget",
              "DESIGN.md, the Practitioner's Guide's findings", +1)

STUDY = Study(
    name="sft_share", question="Q2 SFT share at a fixed budget",
    arms=arms([(f"sft {s:g}", {"sft_share": s}) for s in (0.0, 0.25, 0.5, 0.75, 1.0)]),
    comparisons=(Comparison("success", "sft 0.25", "sft 0", "id", PRIOR),
                 Comparison("success", "sft 0.75", "sft 1", "hard", None)),
    shared_sft=False, seeds=(0, 1, 2), inert_check=False)
