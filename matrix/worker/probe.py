"""Report what an environment really contains, as one JSON line on stdout."""

import json
import platform
import sys

from .engines import load_engine


def describe(engine_name):
    engine = load_engine(engine_name)
    info = {"engine": engine_name, "engine_version": engine.version(),
            "python_version": platform.python_version()}
    info.update(engine.device())
    return info


def probe(engine_name):
    try:
        info = describe(engine_name)
    except Exception as exc:  # the host turns this into 'skipped' cells with the reason
        print(json.dumps({"error": "{}: {}".format(type(exc).__name__, exc)}))
        return 1
    print(json.dumps(info))
    return 0
