"""What an investigation's trials leave in the cache — the models it wrote, each trial's prepared
artifacts and results — removed once it has what it needs: the cache keeps what the run folder's
report links, not every observed copy (explain and repro on an 11 MB model had left 4.9 GB).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from ..plan import Plan
from ..prepare import artifact_dir
from ..run import MatrixRun


@dataclass
class TrialFiles:
    cache: Path
    folder: Path  # where the investigation writes its trial models
    command: str  # the investigation's trtmatrix command, as its locks name it
    made: set[Path] = field(default_factory=set)
    result_dirs: dict[str, Path] = field(default_factory=dict)  # each trial cell's outputs, until removed

    def judge(self, trials: Plan, on_event: Callable[[dict], None]) -> pd.DataFrame:
        """Run trials of other models (ONNX-file cases of their own) and remember what they leave."""
        run = MatrixRun(trials, on_event=on_event, observe=False, command=self.command)  # a verdict is wanted, not a known issue's
        frame = run.judge()
        self.made |= {artifact_dir(self.cache, cell.case, cell.artifact_key) for cell in trials.cells}
        self.made |= set(run.result_dirs.values())
        self.result_dirs.update(run.result_dirs)
        return frame

    def remove(self) -> None:
        for path in [self.folder, *self.made]:
            shutil.rmtree(path, ignore_errors=True)
        self.made.clear()
        self.result_dirs.clear()
