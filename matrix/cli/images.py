"""`trtmatrix images`: the environment definitions under images/: list, build, check."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..config import ConfigError
from .common import _fail, app


images_app = typer.Typer(no_args_is_help=True, help="Environment definitions under images/: list, build, check.")


app.add_typer(images_app, name="images")


ImagesDirOpt = Annotated[Optional[Path], typer.Option(
    "--images-dir", help="Your folder of environment definitions; those that ship with trtmatrix are taken too (yours "
                         "win a name they share). Default: ./images where there is one, else only those that ship.")]


NamesArg = Annotated[Optional[list[str]], typer.Argument(metavar="ENV", help="Environment names (default: all).")]


def _images_dir(images_dir: Path | None) -> Path:
    """--images-dir, or, not given, ./images where there is one, else the folder that ships with
    trtmatrix: a folder without ./images still has the shipped definitions."""
    from ..environments.definitions import BUILTIN_IMAGES

    return images_dir if images_dir is not None else Path("images") if Path("images").is_dir() else BUILTIN_IMAGES


def _envdefs(images_dir: Path | None, names: list[str] | None):
    from ..environments.definitions import available_envdefs

    given, images_dir = images_dir is not None, _images_dir(images_dir)
    if not images_dir.is_dir():
        _fail(f"--images-dir {images_dir}: " + ("not a folder" if images_dir.exists() else "no such folder"))
    try:
        envdefs = available_envdefs(images_dir)
    except ConfigError as exc:
        _fail(str(exc))
    if given and not any(images_dir.glob("*.toml")):  # the user named a folder of nothing: said, the shipped ones shown
        typer.echo(f"warning: --images-dir {images_dir}: no environment definitions (*.toml) in it; "
                   f"those that ship with trtmatrix: {len(envdefs)}", err=True)
    unknown = set(names or ()) - {e.name for e in envdefs}
    if unknown:
        _fail(f"no definition in {images_dir} for {', '.join(sorted(unknown))}")
    return [e for e in envdefs if not names or e.name in names]


def _docker():
    from ..environments.backend import EnvironmentUnavailable
    from ..environments.images import docker_client

    try:
        return docker_client()
    except EnvironmentUnavailable as exc:
        _fail(str(exc), 1)


@images_app.command("list")
def images_list(images_dir: ImagesDirOpt = None) -> None:
    """Every definition: engine, version, backend, what it is built from, and the source of that."""
    from ..report.console import print_definitions

    print_definitions(_envdefs(images_dir, None))


@images_app.command("build")
def images_build(names: NamesArg = None, images_dir: ImagesDirOpt = None,
                 no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Only environments that need no GPU.")] = False,
                 force: Annotated[bool, typer.Option(help="Rebuild even when the image is up to date.")] = False) -> None:
    """Build the Dockerfile-based images; an image whose tag exists is up to date and skipped."""
    from ..environments.backend import EnvironmentUnavailable
    from ..environments.images import build, find_image, local_tag

    client, failed = _docker(), False
    for envdef in _envdefs(images_dir, names):
        if not envdef.dockerfile or (no_gpu and envdef.needs_gpu):
            continue
        tag = local_tag(envdef)
        if not force and find_image(client, tag):
            typer.echo(f"{envdef.name}: {tag} up to date")
            continue
        typer.echo(f"{envdef.name}: building {tag} from {_images_dir(images_dir) / envdef.dockerfile} ...")
        try:
            build(client, envdef)
            typer.echo(f"{envdef.name}: built {tag}")
        except EnvironmentUnavailable as exc:
            failed = True
            typer.echo(f"{envdef.name}: {exc}", err=True)
    raise typer.Exit(1 if failed else 0)


@images_app.command("check")
def images_check(names: NamesArg = None, images_dir: ImagesDirOpt = None) -> None:
    """Which docker images are here, pullable, and runnable on this host — and why not."""
    from ..report.console import checks_table, out
    from ..environments.images import check

    client = _docker()
    out.print(checks_table([check(client, e) for e in _envdefs(images_dir, names) if e.backend == "docker"]))
