"""The contract between the worker and the host, defined here once (the host imports this module;
the worker imports nothing of the host): the files a cell leaves in its results folder, and the
environment variable that tells the supervisor its stdin is a line to the orchestrator."""

CELL_SPEC = "cell.json"      # what to run, written by the supervisor
RESULT = "result.json"       # status, timings and facts: always written, whatever the cell did
OUTPUTS = "outputs.npz"      # the first inference's outputs (warm-up included)
REPEATS = "repeats.npz"      # later inferences that differ from every one kept so far ("<run>/<output>")
LOG = "cell.log"             # the cell process's own stdout and stderr
# onnxruntime's profiler output of a reduced-precision cell (its precision_ran), removed once read.
# In the cell's results folder, not /tmp: a cell killed while profiling leaves it in the cache, and
# the cell's next run (a killed cell has no result, so it runs again) removes it (issue 41, sweep 8 A13).
PROFILE = "profile.tmp"
INPUTS = "inputs.npz"        # a case's inputs, in its prepared artifacts (and a run's refs/)
# In a torch case's artifacts: its module as torch.export made it, once per dtype (fp32, fp16,
# bf16: a program holds the dtypes it was traced with), and what the torch engine needs to run it
# (the torch that made them, input and output names, why an export failed).
PROGRAM = "program-{}.pt2"
PROGRAM_META = "program.json"
# The module itself, pickled with its weights: what the torch engine runs (prepare/torch_module.py).
# Its classes from case files are in modules of this package, imported by path where it is loaded.
MODULE = "module.pt"
# What a case's build changed at the top level of its case file (a config global, a class attribute),
# which a module pickled alone does not carry (prepare/torch_module.changed_state).
MODULE_STATE = "module-state.pt"
CASES_PACKAGE = "trtmatrix_cases"

# result.json: {file name: file_digest} of the arrays the cell wrote, so a stored result whose files
# changed since (damaged, replaced) is never reused or re-judged as the cell's.
DIGESTS = "digests"

WATCH_STDIN = "TRTMATRIX_WATCH_STDIN"  # "1": stdin closes when the orchestrator dies (kill -9 included)


def save_arrays(path, arrays):
    """{name: array} as an .npz file that np.load reads back by name. Not np.savez(path, **arrays):
    tensor names are any text ONNX allows, and `file` or `allow_pickle` would collide with its
    own arguments there. Object arrays are refused (np.load would need pickle to read them)."""
    import zipfile

    import numpy as np

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in arrays.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


def file_digest(path):
    """"sha256:<hex>" of a file's bytes, read in blocks (outputs may be large)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()
