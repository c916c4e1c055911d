"""trtmatrix: numeric compatibility matrix for TensorRT and other inference runtimes.

Kept empty on purpose: importing the package must stay cheap (the CLI, case files and tests
all import submodules directly).
"""
