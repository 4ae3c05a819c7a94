"""Q3 turn budget: RL at a fixed budget of 12 turns vs BudgetMix (each RL episode's budget drawn
from 2..12), and BudgetMix with the turns left stated in every prompt; Pass@(K,T) over the
whole grid, before and after RL, on 100 sampled games of the RL difficulty x 8 episodes.

Every arm keeps the default run's turn cost, so the fixed-budget arm breaks RLOO's all-win ties
the way a drawn budget does: the arms differ in the budgets RL plays, not in tie-breaking.
"""

from meowjax.eval.study_spec import Claim, Comparison, Study, arms

MIX = "2/4/6/8/10/12"
SECOND = "the second paper, as the project's mission states it"
SATURATE = Claim("gains saturate once the turn budget is ~2× the optimal solution length",
                 "DESIGN.md, the Practitioner's Guide's findings", None)
BUDGETMIX = Claim("BudgetMix RL", SECOND, None)
NEEDS_TURNS = Claim("RL gains need enough turns", SECOND, None)

STUDY = Study(
    name="budget", question="Q3 turn budget",
    arms=arms([("fixed T=12", {"passkt_grid": True}),
               ("budgetmix", {"passkt_grid": True, "budget_mix": MIX}),
               ("budgetmix stated", {"passkt_grid": True, "budget_mix": MIX,
                                     "state_budget": True})]),
    comparisons=(
        Comparison("pass@1,4", "budgetmix", "fixed T=12", "hard", BUDGETMIX),
        Comparison("pass@1,12", "budgetmix", "fixed T=12", "hard", BUDGETMIX),
        Comparison("pass@1,4", "budgetmix stated", "budgetmix", "hard", BUDGETMIX),
        Comparison("pass@1,4", "fixed T=12", None, "hard", NEEDS_TURNS),
        Comparison("pass@1,12", "fixed T=12", None, "hard", NEEDS_TURNS),
        Comparison("pass@8,12", "fixed T=12", None, "hard", SATURATE),
    ),
    grids=True)
