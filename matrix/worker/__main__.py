"""`python -m trtmatrix_worker probe | run JOB.json | cell CELL.json`."""

import json
import platform
import sys

# The exit status of a supervisor that cannot start in this environment (an image without numpy):
# it says why in one event line, {"event": "unfit", "error": ...}, and runs no cell.
UNFIT = 3


def _unfit(exc):
    """One line for the host instead of a traceback: what this interpreter lacks."""
    error = str(exc) if isinstance(exc, ModuleNotFoundError) else "{}: {}".format(type(exc).__name__, exc)
    print(json.dumps({"event": "unfit", "error": error, "python": platform.python_version(),
                      "executable": sys.executable}), flush=True)
    return UNFIT


def main(argv):
    usage = "usage: python -m trtmatrix_worker probe ENGINE | run JOB.json | cell CELL.json"
    if len(argv) != 2 or argv[0] not in ("probe", "run", "cell"):
        print(usage, file=sys.stderr)
        return 2
    command, arg = argv
    if command == "probe":
        from .probe import probe
        return probe(arg)
    if command == "run":
        try:
            from .supervisor import run_job  # numpy, through the cell's module
        except ImportError as exc:
            return _unfit(exc)
        return run_job(arg)
    from .cell import run_cell
    return run_cell(arg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
