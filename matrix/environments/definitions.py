"""Environment definitions: one TOML file per environment under images/.

A definition says which engine and version an environment is meant to provide and how to get
it (pinned pip requirements for a virtualenv, or a container image / Dockerfile). The version
written here is only what we asked for: cells record the version the worker reports inside.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal, get_args

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from ..config import ConfigError, Items, Name, Profile, Strict, read_toml, validate

# Docker's reference grammar (registry[:port]/path:tag@digest), so no definition can smuggle
# anything else into an API call or a log line.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = (rf"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
                   r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
ImageReference = Annotated[str, StringConstraints(pattern=IMAGE_REFERENCE, max_length=255)]
# A file beside the definitions in images/, never a path elsewhere.
FileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
BuildArgName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _requirement(text: str) -> str:
    """uv takes each requirement as an argument: one starting with `-` (`--index-url=...`) would be
    an option, so only a PEP 508 requirement is taken."""
    if text.startswith("-"):
        raise ValueError(f"{text!r} is not a requirement but an option")
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        raise ValueError(f"{text!r} is not a requirement (PEP 508): {str(exc).splitlines()[0]}") from None
    return text


def _not_an_option(text: str) -> str:
    if text.startswith("-"):
        raise ValueError(f"{text!r} is an option, not an interpreter")
    return text


Engine = Literal["onnxruntime", "tensorrt", "torch"]
ENGINES = get_args(Engine)


class EnvDef(Strict):
    name: Name
    engine: Engine
    # What the definition asks for; a host environment has what its interpreter has (none asked).
    version: str | None = Field(default=None, min_length=1)
    backend: Literal["venv", "docker", "host"]
    # true: runs only on a GPU (skipped elsewhere, with the reason). "optional": leases a GPU where
    # the host has one and runs without one elsewhere (TensorRT-RTX builds engines on the CPU).
    gpu: Literal[False, True, "optional"] = False
    # The engine's product: full TensorRT, or TensorRT-RTX (the worker then imports tensorrt_rtx,
    # and Polygraphy is switched to it by its own POLYGRAPHY_USE_TENSORRT_RTX).
    product: Literal["tensorrt", "tensorrt-rtx"] | None = None
    # venv backend: requirements; venv and host backends: the interpreter (host: default, the one
    # running trtmatrix)
    requirements: Items[Annotated[str, AfterValidator(_requirement)]] = ()
    python: Annotated[str, AfterValidator(_not_an_option)] | None = None
    # docker backend
    image: ImageReference | None = None
    dockerfile: FileName | None = None
    build_args: dict[BuildArgName, str] = {}
    # Where the engine/version/image mapping comes from (release notes, index page).
    source: str = ""
    description: str = ""
    path: Path | None = Field(default=None, exclude=True)

    @field_validator("version")
    @classmethod
    def _pep440(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a PEP 440 version") from None
        return value

    @model_validator(mode="after")
    def _backend_fields(self) -> EnvDef:
        if self.backend != "host" and self.version is None:
            raise ValueError(f"a {self.backend} environment needs 'version' (what it is meant to provide)")
        if self.backend == "host" and (self.requirements or self.image or self.dockerfile):
            raise ValueError("a host environment installs nothing: no 'requirements', 'image' or 'dockerfile'")
        if self.backend == "venv" and not self.requirements:
            raise ValueError("a venv environment needs 'requirements' (pinned pip specifiers)")
        if self.backend == "docker" and not (self.image or self.dockerfile):
            raise ValueError("a docker environment needs 'image' or 'dockerfile'")
        if self.product and self.engine != "tensorrt":
            raise ValueError("'product' chooses between TensorRT products: only for engine = 'tensorrt'")
        if self.image and self.dockerfile:
            raise ValueError("give 'image' or 'dockerfile', not both")
        if self.dockerfile and self.path and not (self.path.parent / self.dockerfile).is_file():
            raise ValueError(f"dockerfile {self.dockerfile!r} not found beside {self.path.name}")
        return self

    @property
    def label(self) -> str:
        """What results call the engine: the product where there are two (their versions are
        not one sequence: TensorRT-RTX 1.7 is no older than TensorRT 10.8)."""
        return self.product or self.engine

    @property
    def module(self) -> str:
        """The engine's Python module, as a host interpreter must import it."""
        return "tensorrt_rtx" if self.product == "tensorrt-rtx" else self.engine

    @property
    def needs_gpu(self) -> bool:
        """Cannot run at all without a GPU: skipped, with the reason, on a host without one."""
        return self.gpu is True or (self.engine == "tensorrt" and self.gpu is False)

    def worker_environment(self) -> dict[str, str]:
        """Variables the worker's processes need for this environment's product."""
        return {"POLYGRAPHY_USE_TENSORRT_RTX": "1"} if self.product == "tensorrt-rtx" else {}

    def strongly_typed(self, profile: Profile) -> bool:
        """A strongly typed TensorRT network takes its types from the model: TensorRT-RTX builds
        nothing else; full TensorRT (10+) when the profile asks for `typing = "strong"`."""
        return self.engine == "tensorrt" and (self.product == "tensorrt-rtx" or profile.typing == "strong")

    def runs_fp16_copy(self, profile: Profile) -> bool:
        """FP16 as an FP16 ONNX model (prepare/fp16_variant: keep_fp32 nodes behind casts) rather
        than builder flags: onnxruntime, and strongly typed TensorRT networks."""
        return profile.precision == "fp16" and (self.engine == "onnxruntime" or self.strongly_typed(profile))

    def definition_hash(self) -> str:
        """Changes whenever the definition does; part of every cell's content key."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def load_envdef(path: Path) -> EnvDef:
    data = read_toml(path)
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise ConfigError(path, "name", f"must match the file name {path.stem!r}")
    return validate(EnvDef, {**data, "path": path}, path)


# The definitions that ship with trtmatrix: its source tree's images/ (trtmatrix is installed from
# its checkout, `pip install -e .`), found from a matrix file in any folder.
BUILTIN_IMAGES = Path(__file__).resolve().parents[2] / "images"


def definition_dirs(images_dir: Path) -> list[Path]:
    """Where definitions are looked for, in order: the matrix file's own `images_dir`, then the
    ones that ship with trtmatrix (a definition of the same name in the first wins)."""
    dirs = [images_dir.resolve()] + [BUILTIN_IMAGES] * BUILTIN_IMAGES.is_dir()
    return list(dict.fromkeys(dirs))


def load_envdefs(images_dir: Path, names: tuple[str, ...], config_path: Path) -> list[EnvDef]:
    envs = []
    dirs = definition_dirs(images_dir)
    for i, name in enumerate(names):
        path = next((d / f"{name}.toml" for d in dirs if (d / f"{name}.toml").exists()), None)
        if path is None:
            raise ConfigError(config_path, f"run.environments.{i}", f"no environment definition {name}.toml in "
                              + " or in ".join(str(d) for d in dirs) + " (run.images_dir names your own folder)")
        envs.append(load_envdef(path))
    return envs


def available_envdefs(images_dir: Path) -> list[EnvDef]:
    """Every definition in `images_dir` and those that ship with trtmatrix that it does not shadow."""
    found: dict[str, Path] = {}
    for folder in definition_dirs(images_dir):
        for path in sorted(folder.glob("*.toml")):
            found.setdefault(path.stem, path)
    return [load_envdef(path) for _, path in sorted(found.items())]
