"""Investigations re-use the run machinery on one cell or row and write into its run folder:
`explain` (every intermediate tensor against float64), `bisect` (binary search over engine
releases), `precision` (the fewest layers to keep in FP32). One module each, each a loop over
ordinary cell runs (plan.plan_of_trials / plan_for_row → MatrixRun.judge).
"""
