"""Executors decide where an environment's cells run: `local` (threads on this host, GPU leases)
today; a Ray cluster or one CI shard of N later. Every executor runs the same unit per
environment (`environment_job`: the worker in that environment's backend), and the orchestrator
(matrix.run) keeps plan, prepare, compare, store and report in one place whatever the executor.
"""
