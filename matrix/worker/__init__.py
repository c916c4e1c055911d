"""The code that runs inside an environment (virtualenv or container).

Rules that keep it portable to every NGC image: standard library + numpy + the engine only,
Python 3.8 syntax, and no import of the orchestrator (`matrix`). It is copied next to, not
installed into, the environment (see matrix/environments/staging.py).
"""
