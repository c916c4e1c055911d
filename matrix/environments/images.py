"""Container images of docker environments: which reference to run, building, pulling, checking.

A definition names either an image reference (an NGC tag) or a Dockerfile in images/ with build
arguments. Dockerfile images are tagged `trtmatrix/<env>:<hash>` where the hash covers the
definition and the Dockerfile, so an edited Dockerfile gets a new image and "up to date" is
simply "that tag exists". Everything goes through the docker SDK: no shell strings.
"""

from __future__ import annotations

from dataclasses import dataclass

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound

from .backend import EnvironmentUnavailable
from .definitions import EnvDef
from .gpus import gpu_missing_reason
from .image_names import image_ref, local_tag

CLIENT_TIMEOUT_S = 600


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=CLIENT_TIMEOUT_S)
        client.ping()
    except DockerException as exc:
        raise EnvironmentUnavailable(f"no Docker engine answers on this host ({exc})") from None
    return client


def find_image(client: docker.DockerClient, ref: str):
    try:
        return client.images.get(ref)
    except ImageNotFound:
        return None


def image_fingerprint(client: docker.DockerClient, envdef: EnvDef, image=None) -> str:
    """The image id a run of this environment would use (a re-pulled tag or a rebuilt image
    changes it), or "absent"; looking it up changes nothing."""
    image = image or find_image(client, image_ref(envdef))
    return image.id if image else "absent"


def image_digest(image) -> str:
    """The registry digest where the image came from a registry, else the local image id."""
    repo_digests = image.attrs.get("RepoDigests") or []
    return repo_digests[0] if repo_digests else image.id


def build(client: docker.DockerClient, envdef: EnvDef):
    tag = local_tag(envdef)
    try:
        image, _ = client.images.build(path=str(envdef.path.parent), dockerfile=envdef.dockerfile, tag=tag,
                                       buildargs=dict(envdef.build_args), rm=True, forcerm=True)
    except BuildError as exc:
        tail = "".join(chunk.get("stream", "") or chunk.get("error", "") for chunk in exc.build_log)
        tail = "\n".join(tail.strip().splitlines()[-8:])
        raise EnvironmentUnavailable(f"building {tag} from images/{envdef.dockerfile} failed: {exc.msg}\n{tail}") from None
    except APIError as exc:
        raise EnvironmentUnavailable(f"building {tag} failed: {exc.explanation or exc}") from None
    return image


def pull(client: docker.DockerClient, ref: str):
    try:
        return client.images.pull(ref)
    except DockerException as exc:
        raise EnvironmentUnavailable(f"image {ref} is not on this host and could not be pulled: {exc}") from None


def ensure_image(client: docker.DockerClient, envdef: EnvDef):
    """The image to run, building or pulling it when it is not on this host yet."""
    image = find_image(client, image_ref(envdef))
    if image is not None:
        return image
    return build(client, envdef) if envdef.dockerfile else pull(client, envdef.image)


@dataclass
class ImageCheck:
    env: str
    image: str
    present: bool
    pullable: str  # "yes", "no: why", "n/a (built here)"
    runnable: str  # "yes" or "no: why"


def nvidia_runtime_reason(client: docker.DockerClient) -> str | None:
    runtimes = client.info().get("Runtimes") or {}
    if "nvidia" not in runtimes:
        return "no NVIDIA container runtime in Docker (install nvidia-container-toolkit; nvidia-ctk runtime configure)"
    return None


def check(client: docker.DockerClient, envdef: EnvDef) -> ImageCheck:
    ref = image_ref(envdef)
    present = find_image(client, ref) is not None
    if envdef.dockerfile:
        pullable = "n/a (built here from images/" + envdef.dockerfile + ")"
    else:
        try:
            client.images.get_registry_data(ref)
            pullable = "yes"
        except DockerException as exc:
            pullable = f"no: {getattr(exc, 'explanation', None) or exc}"
    reasons = []
    if envdef.needs_gpu:
        reasons += [r for r in (gpu_missing_reason(), nvidia_runtime_reason(client)) if r]
    if not present and not envdef.dockerfile and not pullable.startswith("yes"):
        reasons.append("image missing and not pullable")
    runnable = "no: " + "; ".join(reasons) if reasons else "yes"
    return ImageCheck(envdef.name, ref, present, pullable, runnable)
