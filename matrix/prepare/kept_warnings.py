"""What PyTorch says while a case is exported, kept for case.json's `export_warnings` instead of
printed on the terminal: Python warnings (the tracer's, deprecations, torch.export's) and the
warnings of Python logging (the dynamo exporter logs through torch's own stderr handlers:
`W1127 … torchvision is not installed. Skipping torchvision::nms`)."""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from typing import Iterator


class _Keep(logging.Handler):
    def __init__(self, said: set[str]):
        super().__init__(logging.WARNING)
        self.said = said

    def emit(self, record: logging.LogRecord) -> None:
        self.said.add(f"{record.levelname} {record.name}: {record.getMessage()}")


@contextmanager
def kept_warnings() -> Iterator[set[str]]:
    """Every logger that prints (and the root, where records without a handler end) holds only a
    handler that keeps, for the time of the block; what was said is in the set once it ends."""
    said: set[str] = set()
    root = logging.getLogger()
    printing = [root, *(logger for logger in logging.Logger.manager.loggerDict.values()
                        if isinstance(logger, logging.Logger) and logger.handlers)]
    handlers = {logger: logger.handlers for logger in printing}
    keep = _Keep(said)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for logger in printing:
            logger.handlers = [keep]
        try:
            yield said
        finally:
            for logger, its_own in handlers.items():
                logger.handlers = its_own
            said.update(f"{w.category.__name__}: {w.message}" for w in caught)
