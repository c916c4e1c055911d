"""matrix.toml: what to run, validated once so nothing later has to second-guess it.

Every mistake is reported as one `ConfigError` naming the file and the dotted key, so the CLI
can print one line and exit 2 instead of a traceback.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, StringConstraints, ValidationError,
                      model_validator)

# Names end up in cell ids, URLs, HTML anchors, file names and container names: keep them tame.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=80)]
PARAM_TYPES = (int, float, str, bool)
# A parameter value is written into cell ids as `k=v`: the same rule as names, plus a leading `-`.
PARAM_TEXT = re.compile(r"[A-Za-z0-9_.+-]{1,80}")


def _param_type(value: Any) -> Any:
    if type(value) not in PARAM_TYPES:
        raise ValueError(f"{_shown(value)} is not a number, text or boolean")
    return value


ParamValue = Annotated[int | float | str | bool, PlainValidator(_param_type)]
def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("empty: give a value")
    return text


# Text that must say something: an empty pattern or address would be taken as one and do nothing.
NonBlank = Annotated[str, AfterValidator(_not_blank)]
# A path setting: `~` is the home folder, as in a shell (never a folder named `~`).
PathText = Annotated[str, AfterValidator(lambda text: os.path.expanduser(_not_blank(text)))]
T = TypeVar("T")
# TOML arrays arrive as lists: a tuple field takes them, its items stay strict.
Items = Annotated[tuple[T, ...], Field(strict=False)]


class ConfigError(Exception):
    """A bad input file, with the key that is wrong."""

    def __init__(self, path: Path | str, key: str, message: str):
        self.path, self.key, self.message = Path(path), key, message
        super().__init__(f"{path}: {key}: {message}" if key else f"{path}: {message}")


class Strict(BaseModel):
    """Strict types: `true` is no number and `"2"` no integer (an int is still a float)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# float32's largest value: an atol this large passes any finite float32 output, an rtol this large
# any against a reference of magnitude 1 or more (and rtol·|ref| overflows float64 near its top).
TOLERANCE_LIMIT = float(np.finfo(np.float32).max)


def _can_fail(value: float) -> float:
    if value >= TOLERANCE_LIMIT:
        raise ValueError(f"{value:g} cannot fail: a tolerance this large (float32's largest value, 3.4e+38, or more) "
                         "passes any output; give one below it")
    return value


# Finite, at least 0 and below TOLERANCE_LIMIT: `atol = inf` (or 1e308) would pass any error, a
# tolerance that cannot fail, as a rule of `cosine = -1` cannot.
ToleranceValue = Annotated[float, Field(ge=0, allow_inf_nan=False), AfterValidator(_can_fail)]


class Tolerance(Strict):
    atol: ToleranceValue
    rtol: ToleranceValue


class Profile(Strict):
    """How an engine should build the model. Engine-neutral; each engine maps it to its knobs."""

    # tf32 (FP32 tensors, TF32 matmuls/convolutions on Ampere and later) and bf16: the torch engine.
    precision: Literal["fp32", "fp16", "tf32", "bf16"] = "fp32"
    optimization: Literal["on", "off"] = "on"
    # Op types (e.g. "Softmax") or layer-name globs held in FP32 inside an FP16 build.
    keep_fp32: Items[NonBlank] = ()
    # Test the harness itself: make the cell crash, hang, raise, return NaN or drift on purpose.
    inject: Literal["crash", "hang", "raise", "nan", "drift"] | None = None
    # Build the engine (session) this many times; outputs of every build and run are compared with
    # the first, so TensorRT's build-to-build tactic differences show as drift.
    builds: int = Field(default=1, ge=1, le=64)
    # The torch engine only: which scaled-dot-product-attention kernel PyTorch may use
    # (torch.nn.attention.sdpa_kernel), and torch.compile (inductor) around the module.
    sdpa_backend: Literal["flash", "efficient", "cudnn", "math"] | None = None
    compile: bool = False
    # The TensorRT engine only: "strong" builds a strongly typed network (TensorRT 9+; its types
    # come from the model, so FP16 profiles build the FP16 ONNX copy, keep_fp32 its FP32 casts);
    # "weak" lets the builder choose per layer (FP16 by flag; layer precisions under obeyed
    # constraints). Unset: the product's own default (TensorRT: weak; TensorRT-RTX: strong only).
    typing: Literal["weak", "strong"] | None = None
    description: str = ""

    @model_validator(mode="after")
    def _keep_fp32_needs_fp16(self) -> Profile:
        if self.keep_fp32 and self.precision != "fp16":
            raise ValueError("keep_fp32 only makes sense with precision = 'fp16'")
        return self


class Acceptance(Strict):
    """A judgement instead of element-wise closeness, for models whose users ask about direction
    or ranking (embeddings, classifiers, rerankers). Every condition given must hold."""

    # Every output's cosine similarity to the reference, in every inference, at least this. Above
    # -1: a cosine is never below it, so `cosine = -1` would pass anything.
    cosine: float | None = Field(default=None, gt=-1, le=1)
    # Share of rows (all axes but the last; a last axis of size 1 makes one row: a score per item,
    # ranked across items) whose reference argmax is among the output's `topk` largest. Above 0,
    # or it holds whatever the output.
    top1: float | None = Field(default=None, gt=0, le=1)
    topk: int = Field(default=1, ge=1)
    # Judge per slice along this axis (0: per sentence of a batch, per query): cosine and top-k
    # are taken within each slice, and the worst slice decides. Unset: over the whole output.
    axis: int | None = Field(default=None, ge=0)
    # What a slice is called in the details ("sentence 3 of 4: cosine 0.9961").
    axis_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z _-]{0,30}$")] = "slice"

    @model_validator(mode="after")
    def _some_condition(self) -> Acceptance:
        if self.cosine is None and self.top1 is None:
            raise ValueError("give cosine and/or top1")
        if self.topk > 1 and self.top1 is None:
            raise ValueError("topk says how top1 agreement is counted: give top1 too")
        if "axis_name" in self.model_fields_set and self.axis is None:
            raise ValueError("axis_name names the slices along 'axis': give axis too")
        return self

    def text(self) -> str:
        parts = [f"cosine ≥ {self.cosine:g}"] if self.cosine is not None else []
        if self.top1 is not None:
            parts.append(f"top{self.topk} agreement ≥ {self.top1:g}")
        per = f" per {self.axis_name} (axis {self.axis})" if self.axis is not None else ""
        return " and ".join(parts) + per


class CaseEntry(Strict):
    profiles: Annotated[Items[Name], AfterValidator(_no_repeats)] = Field(min_length=1)
    # Axes: every combination of values becomes its own row (e.g. batch = [1, 4]).
    params: dict[Name, list[ParamValue]] | None = None
    # Fixed keyword arguments for the case's build function (e.g. a checkpoint directory).
    options: dict[Name, Any] = {}
    tolerances: dict[Name, Tolerance] = {}
    # Per profile: judge by an acceptance rule (cosine, top-k agreement) instead of atol/rtol.
    accept: dict[Name, Acceptance] = {}
    # GPU-model globs (e.g. "*L4*"): on GPU environments the case runs only on matching GPUs.
    gpus: Items[str] = ()
    # In place of [run].timeout_s for this case's cells and rows: one heavy model among light ones
    # raises its own, and a light one that hangs is stopped early. Unset: the run's.
    timeout_s: float | None = Field(default=None, gt=0)
    # Bring-your-own-model cases: an ONNX file plus inputs, optionally expected outputs. Several
    # input sets (batch 1 and batch 4, short and long sentences): a list of files, one row each
    # (named by the file's stem), with `expected` a list of the same length when given.
    onnx: PathText | None = None
    inputs: PathText | Items[PathText] | None = None
    expected: PathText | Items[PathText] | None = None
    # An input whose zeros mark positions to leave out of judging (attention_mask: padding), in
    # every output whose leading dimensions are the mask's shape.
    mask: str | None = None
    # External test suites, one row per test (sources/onnx_suites.py): the ONNX backend node tests
    # or "light" models of the installed onnx package, or a folder in the ONNX test layout; globs
    # pick the tests.
    suite: Literal["onnx-backend-node", "onnx-backend-light"] | None = None
    suite_dir: PathText | None = None
    include: Items[str] = ()
    exclude: Items[str] = ()

    @model_validator(mode="after")
    def _onnx_case_is_complete(self) -> CaseEntry:
        if self.onnx and not self.inputs:
            raise ValueError("an ONNX-file case needs 'inputs' (an .npz file) beside 'onnx'")
        if (self.inputs or self.expected) and not self.onnx:
            raise ValueError("'inputs' and 'expected' belong to ONNX-file cases: give 'onnx' too")
        if sum(map(bool, (self.onnx, self.suite, self.suite_dir))) > 1:
            raise ValueError("give one of 'onnx', 'suite' and 'suite_dir'")
        if (self.include or self.exclude) and not (self.suite or self.suite_dir):
            raise ValueError("'include' and 'exclude' pick tests of a 'suite' or 'suite_dir'")
        if isinstance(self.inputs, tuple) or isinstance(self.expected, tuple):
            _check_input_sets(self.inputs, self.expected)
        if self.mask is not None and self.is_suite:
            raise ValueError("'mask' names an input of an ONNX-file or case-file case, not of a suite's tests")
        if (self.onnx or self.is_suite) and (self.params or self.options):
            kind = "an ONNX-file case" if self.onnx else "a suite case"
            raise ValueError(f"{kind} has no {'params' if self.params else 'options'}: they are arguments of a "
                             "case file's build function (one ONNX model is one row per profile)")
        return self

    @property
    def is_suite(self) -> bool:
        return bool(self.suite or self.suite_dir)


def input_set_name(path: str) -> str:
    """A row's name for one of several input files: its stem (`b4` for `inputs/b4.npz`)."""
    return Path(path).stem


def _check_input_sets(inputs, expected) -> None:
    if not isinstance(inputs, tuple):
        raise KeyedError("expected", "a list of expected-output files needs a list of input files, one each")
    if not inputs:
        raise KeyedError("inputs", "give at least one inputs file")
    if expected is not None and (not isinstance(expected, tuple) or len(expected) != len(inputs)):
        raise KeyedError("expected", f"give one expected-outputs file per inputs file ({len(inputs)})")
    problem = param_values_problem([input_set_name(path) for path in inputs])
    if problem:
        raise KeyedError(f"inputs{problem[0]}", f"the file's stem names its row: {problem[1]}")


def _no_repeats(values: tuple) -> tuple:
    """A name twice (an environment, a profile) would be two rows or columns under one cell id."""
    for i, value in enumerate(values):
        if value in values[:i]:
            raise ValueError(f"{value!r} is listed twice (item {i})")
    return values


class RunSettings(Strict):
    environments: Annotated[Items[Name], AfterValidator(_no_repeats)] = Field(min_length=1)
    cases_dir: PathText = "cases"
    images_dir: PathText = "images"
    cache_dir: PathText | None = None  # None: the user's cache (store/cache.py user_cache)
    reports_dir: PathText = "reports"
    timeout_s: float = Field(default=900, gt=0)
    jobs: int = Field(default=1, ge=1)
    # Cells of one CPU environment at once (default: the cores, shared among `jobs`); GPU: one.
    cell_jobs: int | None = Field(default=None, ge=1)
    # Where environments run: this host, or the Ray cluster at `ray_address` ("auto": the cluster
    # this host belongs to; "host:port"; "ray://host:10001"). `trtmatrix run --ray ADDRESS` overrides.
    executor: Literal["local", "ray"] = "local"
    ray_address: NonBlank = "auto"


class MatrixConfig(Strict):
    run: RunSettings
    profiles: dict[Name, Profile] = Field(min_length=1)
    tolerances: dict[Literal["fp32", "fp16", "tf32", "bf16"], Tolerance]
    cases: dict[Name, CaseEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _cases_are_consistent(self) -> MatrixConfig:
        for case_name, entry in self.cases.items():
            for param, values in (entry.params or {}).items():
                if problem := param_values_problem(values):
                    raise KeyedError(f"cases.{case_name}.params.{param}{problem[0]}", problem[1])
            for i, profile in enumerate(entry.profiles):
                if profile not in self.profiles:
                    raise KeyedError(f"cases.{case_name}.profiles.{i}", f"unknown profile {profile!r}")
            for table in ("tolerances", "accept"):
                for profile in getattr(entry, table):
                    if profile not in entry.profiles:
                        raise KeyedError(f"cases.{case_name}.{table}.{profile}",
                                         f"{table} for a profile this case does not run")
        used = {self.profiles[p].precision for entry in self.cases.values() for p in entry.profiles}
        for precision in sorted(used - set(self.tolerances)):  # only what some case runs needs a default
            raise KeyedError(f"tolerances.{precision}", "missing default tolerance")
        return self

    def tolerance(self, case: str, profile: str) -> Tolerance:
        entry = self.cases[case]
        return entry.tolerances.get(profile) or self.tolerances[self.profiles[profile].precision]

    def acceptance(self, case: str, profile: str) -> Acceptance | None:
        return self.cases[case].accept.get(profile)

    def timeout_s(self, case: str) -> float:
        """How long each of the case's cells, and each of its rows' preparation, may take."""
        return self.cases[case].timeout_s or self.run.timeout_s


class KeyedError(ValueError):
    """A cross-field error that knows its own key (pydantic would only know the model)."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(message)


def param_values_problem(values: list) -> tuple[str, str] | None:
    """(`.index`, why) for the first value that would break a cell id or repeat a row, else None.
    Ids go into URLs, HTML anchors, file names and terminal lines, so a value's text is letters,
    digits and `_ . + -` (at most 80); and 1 and 1.0, or true and "True", would be one row twice."""
    if not isinstance(values, (list, tuple)) or not values:
        return "", "give a non-empty list of values"
    for i, value in enumerate(values):
        if type(value) not in PARAM_TYPES:
            return f".{i}", f"{_shown(value)} is not a number, text or boolean"
        if not PARAM_TEXT.fullmatch(str(value)):
            return f".{i}", f"{_shown(value)} cannot be a parameter value (letters, digits, _ . + -; at most 80)"
        for earlier in values[:i]:
            if earlier == value or str(earlier) == str(value):
                return f".{i}", f"{_shown(value)} and {_shown(earlier)} would be the same row"
    return None


def _shown(value: Any) -> str:
    text = repr(value)  # repr: control characters are written out, never sent to a terminal
    return text if len(text) <= 40 else text[:37] + "..."


def _first_error(path: Path, exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, KeyedError):  # its key is below where the error was raised
        return ConfigError(path, ".".join([*map(str, err["loc"]), cause.key]), str(cause))
    key = ".".join(str(part) for part in err["loc"] if part != "[key]")  # pydantic's mark of a dict key: the key is shown
    message = err["msg"].removeprefix("Value error, ")
    if err["type"].endswith("_type") and isinstance(err["input"], PARAM_TYPES):
        message += f", not {_shown(err['input'])}"
    if err["type"] == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        message = (f"{err['input']!r} is not a valid name (ASCII letters, digits, _ . + -; starts with a letter or digit)"
                   if pattern == NAME_PATTERN else f"{err['input']!r} is not allowed here (must match {pattern})")
    return ConfigError(path, key, message)


def read_toml(path: Path) -> dict:
    """TOML is UTF-8 (a leading byte-order mark, as some editors write, is accepted); anything
    else, a folder, an unreadable file: one ConfigError naming the file. A pipe is refused unread
    (reading one waits for a writer forever)."""
    if path.exists() and not path.is_file() and not path.is_dir():
        raise ConfigError(path, "", "not a regular file (a pipe, a device or a socket)")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(path, "", f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                                    "TOML files are UTF-8") from None
    except OSError as exc:
        raise ConfigError(path, "", f"cannot be read: {exc.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, "", f"not valid TOML: {exc}") from None
    except RecursionError:  # arrays or tables nested thousands deep
        raise ConfigError(path, "", "not valid TOML here: nested too deeply (arrays or tables hundreds of levels within each other)") from None


def validate(model: type[BaseModel], data: dict, path: Path):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(path, exc) from None


def load_config(path: Path | str) -> MatrixConfig:
    path = Path(path)
    return validate(MatrixConfig, read_toml(path), path)


class CaseTolerances(Strict):
    tolerances: dict[Name, Tolerance] = {}
    accept: dict[Name, Acceptance] = {}

    @model_validator(mode="after")
    def _something(self) -> CaseTolerances:
        if not (self.tolerances or self.accept):
            raise ValueError("give tolerances or accept tables")
        return self


class ToleranceFile(Strict):
    """A file of per-case tolerances (`trtmatrix tolerances suggest` writes one), in the matrix
    file's own layout: [cases.<case>.tolerances.<profile>] atol/rtol, and for a profile judged by
    an acceptance rule [cases.<case>.accept.<profile>]. One with no case (suggest found nothing to
    suggest: its comments say why) is read as changing nothing, as suggest's own output must be."""

    cases: dict[Name, CaseTolerances] = {}


def _not_a_matrix_file(raw: dict, path: Path) -> None:
    """A matrix file given for a tolerance file is said as such, not as pydantic's "Extra inputs are
    not permitted" on its first case key (issue 41, sweep 7 N5)."""
    cases = raw.get("cases") if isinstance(raw.get("cases"), dict) else {}
    keys = [f"cases.{name}.{key}" for name, entry in cases.items() if isinstance(entry, dict)
            for key in entry if key not in ("tolerances", "accept")]
    found = [key for key in raw if key != "cases"] + keys
    if found:
        raise ConfigError(path, "", f"not a tolerance file (it has `{found[0]}`: a matrix file?); a tolerance file holds "
                                    "only [cases.<case>.tolerances.<profile>] and [cases.<case>.accept.<profile>] tables, "
                                    "as `trtmatrix tolerances suggest` writes them")


def _entries_known(raw: dict, config: MatrixConfig, path: Path) -> None:
    """A tolerance file's entries name cases and profiles the matrix has (sweep 9 B6: an unknown
    profile was said as "….fp99.rtol: Field required")."""
    cases = raw.get("cases")
    for name, entry in cases.items() if isinstance(cases, dict) else ():
        if name not in config.cases:
            raise ConfigError(path, f"cases.{name}", f"{name!r} is not a case of the matrix")
        for table in ("tolerances", "accept"):
            profiles = entry.get(table) if isinstance(entry, dict) else None
            for profile in profiles if isinstance(profiles, dict) else ():
                if profile not in config.cases[name].profiles:
                    raise ConfigError(path, f"cases.{name}.{table}.{profile}", f"{name} does not run profile {profile!r}")


def with_tolerances(config: MatrixConfig, path: Path) -> MatrixConfig:
    """The matrix with a tolerance file's entries in place of its own; an entry for a case or
    profile the matrix does not have is an error, not silently ignored."""
    raw = read_toml(path)
    _not_a_matrix_file(raw, path)
    _entries_known(raw, config, path)  # first: a profile it lacks is that, not the entry's missing rtol
    given = validate(ToleranceFile, raw, path)
    cases = dict(config.cases)
    for name, entry in given.cases.items():
        cases[name] = cases[name].model_copy(update={"tolerances": {**cases[name].tolerances, **entry.tolerances},
                                                     "accept": {**cases[name].accept, **entry.accept}})
    return config.model_copy(update={"cases": cases})
