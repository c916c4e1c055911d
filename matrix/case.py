"""The API that case files under cases/ use.

A case is a function that builds a PyTorch module and its example inputs, decorated with
`@case(...)`. It is discovered by path (like pytest discovers tests), so a case file needs no
registration anywhere else. The function is called once per combination of `params` values,
after seeding torch, numpy's global generator and Python's `random` with `seed`, with the
combination (and any `options` from matrix.toml) as keyword arguments, and returns
`(module, {input_name: tensor})`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Export:
    """How torch.onnx.export is called for this case."""

    opset: int = 17
    output_names: tuple[str, ...] = ("output",)
    # {input_or_output_name: {axis: "dim_name"}}, as torch.onnx.export takes it.
    dynamic_axes: dict[str, dict[int, str]] | None = None
    # False: the TorchScript exporter (what most deployed models were exported with).
    dynamo: bool = False


@dataclass(frozen=True)
class CaseDef:
    name: str
    build: Callable[..., tuple[Any, dict[str, Any]]]
    params: dict[str, list] = field(default_factory=dict)
    seed: int = 0
    export: Export = Export()
    description: str = ""
    source: Path | None = None


def case(name: str | None = None, *, params: dict[str, list] | None = None, seed: int = 0,
         export: Export = Export(), description: str = "") -> Callable[[Callable], CaseDef]:
    def register(build: Callable) -> CaseDef:
        return CaseDef(
            name=name or build.__name__,
            build=build,
            params=dict(params or {}),
            seed=seed,
            export=export,
            description=description or (build.__doc__ or "").strip().split("\n")[0],
        )

    return register
