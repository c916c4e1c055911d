"""The image a docker environment runs, by name: apart from images.py, so that what only names an
image (a run's messages, a repro's README) does not import the docker SDK (80 ms of every run)."""

from __future__ import annotations

import hashlib
import re

from .definitions import EnvDef


def local_tag(envdef: EnvDef) -> str:
    dockerfile = envdef.path.parent / envdef.dockerfile
    digest = hashlib.sha256(envdef.definition_hash().encode() + dockerfile.read_bytes()).hexdigest()
    repo = re.sub(r"[^a-z0-9]+", "-", envdef.name.lower()).strip("-")
    return f"trtmatrix/{repo}:{digest[:12]}"


def image_ref(envdef: EnvDef) -> str:
    return local_tag(envdef) if envdef.dockerfile else envdef.image
