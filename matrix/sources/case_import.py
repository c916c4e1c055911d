"""A case file imported in a process of its own (case_files.import_apart runs this module): its
declarations as JSON on stdout's last line, or the ConfigError its import raised as
{"key", "message"} with exit 2. The file sees trtmatrix's own command line in sys.argv, as it
would in trtmatrix's process (an argparse call in it names `trtmatrix`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..config import ConfigError
from ..stops import end_with_parent
from .case_files import declarations, load_case_file


def main(path: Path) -> int:
    try:
        declared = declarations(load_case_file(path))
    except ConfigError as exc:
        print(json.dumps({"key": exc.key, "message": exc.message}), flush=True)
        return 2
    try:
        text = json.dumps(declared)
    except (TypeError, ValueError) as exc:  # parameter values JSON cannot hold
        print(json.dumps({"key": "", "message": f"its cases' params cannot be indexed ({exc})"}), flush=True)
        return 2
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    end_with_parent()
    path, sys.argv = Path(sys.argv[1]), json.loads(sys.argv[2])
    code = main(path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # not waiting for threads the file started (its parent ends what it left)
