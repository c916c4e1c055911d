"""What prepared artifacts and model variants depend on beyond a case's own definition, as hashes
for the plan's keys: a key that misses one of these replays a result a new run would not compute.

- prepare's own source files (what it writes changes with its code, no hand-bumped number);
- the host tools that export and convert, by their installed versions;
- an ONNX file's external data (models saved with `save_as_external_data`);
- every file under a path that a case's options name (a checkpoint folder), by content.
"""

from __future__ import annotations

import os
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import onnx
from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

from ..config import Profile
from ..store.hashing import hash_files, hash_json

PREPARE_SOURCE = Path(__file__).parent
# What decides the reference is prepared with it (matrix/reference/).
REFERENCE_SOURCE = PREPARE_SOURCE.parent / "reference"
# Their versions are part of every exported case's artifact key.
EXPORT_TOOLS = ("torch", "onnx", "onnxscript", "transformers")
# The FP16 copy that onnxruntime's FP16 profiles run: onnxruntime.transformers.float16 converts it,
# onnx checks and saves it (fp16_variant.py).
FP16_TOOLS = ("onnxruntime", "onnx")


@cache  # one run asks once per cell; installed packages do not change during it
def tool_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


@cache
def prepare_code_hash() -> str:
    return hash_files([*PREPARE_SOURCE.rglob("*.py"), *REFERENCE_SOURCE.rglob("*.py")], root=PREPARE_SOURCE.parent)


def variant_key(profile: Profile, fp16_copy: bool) -> str | None:
    """What decides the model an engine runs for a profile beyond the artifact, or None where it runs
    the exported model itself: FP16 profiles that run an FP16 copy made on the host
    (EnvDef.runs_fp16_copy: onnxruntime, strongly typed TensorRT)."""
    if not fp16_copy:
        return None
    return hash_json({"keep_fp32": profile.keep_fp32, "tools": tool_versions(FP16_TOOLS)})


def external_data_files(model: Path) -> list[Path]:
    """The files beside an ONNX model that hold its tensors' data (onnx's external data)."""
    proto = onnx.load(str(model), load_external_data=False)
    locations = {ExternalDataInfo(t).location for t in _get_all_tensors(proto) if uses_external_data(t)}
    return sorted(model.parent / location for location in locations)


def option_files(options: Any) -> dict[str, str]:
    """{option value: content hash} for each option value (nested ones too) that names an existing
    file or folder — a text with a `/` in it, absolute or relative to the working directory as the
    case would open it. A folder is every file under it, hidden ones (`.git`, `.cache`) aside."""
    if isinstance(options, dict):
        options = list(options.values())
    if isinstance(options, (list, tuple)):
        return {path: digest for value in options for path, digest in option_files(value).items()}
    if not (isinstance(options, str) and "/" in options and options.strip("/") and os.path.exists(options)):
        return {}
    root = Path(options)
    if root.is_file():
        return {options: _file_hash(root)}
    files = sorted(p for p in root.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(root).parts))
    return {options: hash_json({str(p.relative_to(root)): _file_hash(p) for p in files})}


def _file_hash(path: Path) -> str:
    stat = path.stat()
    return _content_hash(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@cache
def _content_hash(path: str, size: int, mtime_ns: int) -> str:
    """By content; size and mtime only say whether this process has read the file already (a
    checkpoint of gigabytes is read once per process, not once per cell)."""
    return hash_files([Path(path)])
