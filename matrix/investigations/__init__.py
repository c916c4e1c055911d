"""Investigations re-use the run machinery on one cell or row and write into its run folder:
`explain` (every intermediate tensor against float64), `bisect` (binary search over engine
releases), `precision` (the fewest layers to keep in FP32), `repro` (a folder to file upstream: reduce.py cuts
the model, repro_issue.py and repro_render.py write repro.py and ISSUE.md from templates/). Each is
a loop over ordinary cell runs (plan.plan_of_trials / plan_for_row → MatrixRun.judge).
"""
