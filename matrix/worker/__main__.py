"""`python -m trtmatrix_worker probe | run JOB.json | cell CELL.json`."""

import sys

from .unfit import unfit


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
            return unfit(exc)
        return run_job(arg)
    from .cell import run_cell
    return run_cell(arg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
