"""Statuses a reader must tell apart stay apart for colour-blind readers: each pair's colours,
simulated for protanopia, deuteranopia and tritanopia (Machado, Oliveira and Fernandes 2009,
severity 1), differ by at least MIN_DELTA_E in CIELAB; `built` (an engine never run) also carries
stripes, so it never reads as a solid colour."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import REPO

CSS = (REPO / "matrix" / "report" / "templates" / "_style.css").read_text()
SIMULATIONS = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
    "normal vision": np.eye(3),
}
MIN_DELTA_E = 15.0
# Pairs a reader must not confuse: a known failure and an engine that never ran (built: striped as
# well, which sets it apart from every solid colour); a known failure that no longer fails and one
# that does; a known failure and a pass.
PAIRS = [("xfail", "built"), ("xfail", "xpass"), ("xfail", "pass")]


def colours(status: str) -> list[str]:
    rule = re.search(rf"\.{status} \{{ background: ([^;]+);", CSS).group(1)
    return re.findall(r"#[0-9a-f]{6}", rule)


def lab(hex_colour: str, simulation) -> np.ndarray:
    srgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    linear = np.clip(np.asarray(simulation) @ linear, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


@pytest.mark.parametrize("a, b", PAIRS)
@pytest.mark.parametrize("vision", SIMULATIONS)
def test_statuses_a_reader_must_tell_apart_differ_in_every_colour_vision(a, b, vision):
    for colour_a in colours(a)[:1]:  # the first colour of a stripe pattern is its strongest
        for colour_b in colours(b)[:1]:
            delta = float(np.linalg.norm(lab(colour_a, SIMULATIONS[vision]) - lab(colour_b, SIMULATIONS[vision])))
            assert delta >= MIN_DELTA_E, f"{a} {colour_a} and {b} {colour_b}: ΔE {delta:.1f} under {vision}"


def test_built_is_striped():
    assert "repeating-linear-gradient" in re.search(r"\.built \{ background: ([^;]+);", CSS).group(1)
