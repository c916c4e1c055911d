"""`python -m trtmatrix_worker probe | run JOB.json | cell CELL.json`."""

import sys


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
        from .supervisor import run_job
        return run_job(arg)
    from .cell import run_cell
    return run_cell(arg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
