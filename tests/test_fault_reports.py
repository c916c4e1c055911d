"""Every registered onnxruntime fault through `trtmatrix repro`, and the two found here that the
repository had not held before (issue 42): an FP16 LayerNorm pattern that onnxruntime 1.20.0-1.29.0
fuse with epsilon 1e-5 (a regression, fixed in 1.30.0) and a Cast INT32 → BOOL chain whose INT32 Cast
every release up to 1.25.1 drops (present since the oldest release tried, fixed in 1.26.0).

Real releases in the venvs trtmatrix makes (the session's cache: ort-1.16.3 to ort-1.20 and ort-1.32
are the suite's; 1.19.2 and 1.20.0 test_bug_reports' bisects; new here: 1.24.4 for the AveragePool
regression and the two pairs at the new faults' fixes, 1.25.1/1.26.0 and 1.29.0/1.30.0).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, numpy_helper

from conftest import REPO, matrix_file
from matrix.sources.fault_patterns import attribute_value, constants, element_types, input_names, schema_default
from matrix.sources.known_issues import REGISTRY, load_registry
from matrix.store import list_runs
from test_repro import run_repro, sections, venv_python

LAYERNORM, CAST = "ort_layernorm_fp16_epsilon/fp32", "ort_cast_int_to_bool_chain/fp32"
# Each registered fault's case, and the environment of a release it fails on.
FAILING = {"ort_clip_fp16_min_only": "ort-1.19.0", "ort_pad_avgpool_fusion": "ort-1.19.0",
           "ort_pad_maxpool_fusion": "ort-1.17", "ort_avgpool_count_include_pad_end": "ort-1.24.4",
           "ort_layernorm_fp16_epsilon": "ort-1.20", "ort_cast_int_to_bool_chain": "ort-1.20"}
BODY = '[profiles.fp32]\nprecision = "fp32"\n' + "".join(f'[cases.{case}]\nprofiles = ["fp32"]\n' for case in FAILING) + \
    '[cases.ort_layernorm_fp16_epsilon.tolerances.fp32]\natol = 1e-2\nrtol = 1e-2\n'  # an FP16 model's own rounding


def trtmatrix(*args):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def reports(tmp_path_factory, cache_dir):
    """One run of every registered onnxruntime fault's case, the new faults bisected each way they
    can be, and a repro folder of each fault's failing cell: {case: (folder, ISSUE.md)}."""
    home = tmp_path_factory.mktemp("fault-reports")
    config = matrix_file(home, cache_dir, BODY, environments=(
        "ort-1.16.3", "ort-1.17", "ort-1.18.1", "ort-1.19.0", "ort-1.20", "ort-1.24.4", "ort-1.32"))
    assert trtmatrix("run", "-c", str(config)).returncode in (0, 1)
    for row, good, bad in ((LAYERNORM, "1.19.0", "1.20.1"), (LAYERNORM, "1.30.0", "1.29.0"), (CAST, "1.26.0", "1.25.1")):
        done = trtmatrix("bisect", row, "--good", good, "--bad", bad, "-c", str(config))
        assert done.returncode == 0, done.stderr
    found = {}
    for case, env in FAILING.items():
        done = trtmatrix("repro", f"{case}/fp32/{env}", "-c", str(config), "--json")
        assert done.returncode == 0, done.stderr  # repro exits 0 after the bisects, either direction
        folder = Path(json.loads(done.stdout)["folder"])
        found[case] = folder, (folder / "ISSUE.md").read_text()
    return config, list_runs(home / "reports")[-1], found


def title_of(issue: str) -> str:
    return issue.split("**Title:** `")[1].split("`")[0]


def shown(name: str, value) -> str:
    """How a report names an attribute's or constant's value: an element type by its name."""
    if name in ("to", "dtype") and isinstance(value, int):
        return TensorProto.DataType.Name(value)
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value.decode() if isinstance(value, bytes) else value)


def test_each_registered_faults_title_names_its_op_and_the_values_that_trigger_it(reports):
    """Issue 42, build 2 and point 4 (the title names the trigger): for every registered onnxruntime
    fault, the node of the attached model.onnx that holds the fault's pattern is found, and the
    title names its op, each attribute the pattern keys on with the value the node has, the inputs
    it was not given, its small constant inputs' values, its element type and the op feeding it —
    every value read from the model, none from the registry's text."""
    _, _, found = reports
    faults = [i for i in load_registry(REPO / "cases" / REGISTRY) if i.fault is not None and i.engine == "onnxruntime"]
    assert {i.case for i in faults} == set(FAILING)  # every registered fault is tried here
    for issue in faults:
        folder, text = found[issue.case]
        title = title_of(text)
        model = onnx.load(str(folder / "model.onnx"))
        (node,) = issue.fault.nodes_in(model)
        where = f"{issue.id}: {title}"
        assert len(title) <= 256 and f"{node.op_type}(" in title, where  # a GitHub issue title holds 256 characters
        for name in issue.fault.attributes:
            assert f"{name}={shown(name, attribute_value(model, node, name))}" in title, where
        for name in issue.fault.nonzero:
            assert f"{name}={shown(name, attribute_value(model, node, name))}" in title, where
        names = input_names(model, node)
        for name in issue.fault.absent:
            index = names.index(name)
            if index >= len(node.input) or not node.input[index]:
                assert f"{name} not given" in title, where
        values = constants(model)
        for index, given in enumerate(node.input):
            if index and given in values and values[given].size == 1:
                assert f"{names[index]}={shown(names[index], values[given].item())}" in title, where
        if issue.fault.dtype:
            assert element_types(model)[node.input[0]] == issue.fault.dtype and f" in {issue.fault.dtype}" in title, where
        if issue.fault.after:
            producer = next(n for n in model.graph.node if node.input[0] in n.output)
            before = title.split(f"→ {node.op_type}(")[0]
            assert f"{producer.op_type}(" in before, where
            for attribute in producer.attribute:  # those it sets to other than its schema's default, at least
                value = onnx.helper.get_attribute_value(attribute)
                if value != schema_default(model, producer, attribute.name):
                    assert f"{attribute.name}={shown(attribute.name, value)}" in before, where


def test_the_layernorm_regression_reads_regression_fixed_in_and_its_upstream_links(reports):
    """Issue 42 done-when, first fault not in the repository: after a regression bisect and a fix
    bisect, ISSUE.md says a regression from 1.19.2, first bad 1.20.0, fixed in 1.30.0 (last bad
    1.29.0); the title names the epsilon the fusion loses; the upstream pull requests are linked."""
    _, _, found = reports
    _, issue = found["ort_layernorm_fp16_epsilon"]
    title = title_of(issue)
    assert "→ ReduceMean(axes=[-1], keepdims=1) → Add(B=0.5) → Sqrt → Div → Mul → Add in float16: wrong outputs" in title
    assert "on onnxruntime 1.20.0 to 1.29.0 (CPU); fixed in 1.30.0" in title
    described = sections(issue)["Describe the issue"]
    assert "A regression: onnxruntime 1.19.2 gives the right numbers, 1.20.0 is the first release" in described
    assert "Already fixed: onnxruntime 1.30.0 gives the right numbers (the last bad release tried: 1.29.0)" in described
    assert "Bisect from 1.19.0 (good) to 1.20.1 (bad): regression" in described
    assert "Bisect from 1.30.0 (good) to 1.29.0 (bad): fix" in described
    assert "Known upstream: https://github.com/microsoft/onnxruntime/pull/22063" in described


def test_the_cast_chain_reads_present_since_fixed_in_and_its_upstream_issue(reports):
    """Issue 42 done-when, second fault not in the repository: wrong on every release tried up to
    1.25.1, so a regression bisect has nothing to find and ISSUE.md says present since the oldest
    release tried; the fix bisect gives fixed in 1.26.0; the title names both Casts' types."""
    config, _, found = reports
    _, issue = found["ort_cast_int_to_bool_chain"]
    assert title_of(issue) == ("Cast(to=INT32) → Cast(to=BOOL) → Cast(to=FLOAT): wrong outputs (max_abs 1.000e+00) on "
                               "onnxruntime 1.16.3 to 1.25.1 (CPU); fixed in 1.26.0")
    described = sections(issue)["Describe the issue"]
    assert "Present since the oldest of the" in described and "1.16.3: no older release tried gives the right" in described
    assert "A regression" not in described
    assert "Already fixed: onnxruntime 1.26.0 gives the right numbers (the last bad release tried: 1.25.1)" in described
    assert "Known upstream: https://github.com/microsoft/onnxruntime/issues/13418" in described
    refused = trtmatrix("bisect", CAST, "--good", "1.16.3", "--bad", "1.20.1", "-c", str(config))
    assert refused.returncode != 0 and "is fail at both 1.16.3 and 1.20.1: nothing to bisect" in refused.stderr


@pytest.mark.parametrize("case, bad, good", [("ort_layernorm_fp16_epsilon", "ort-1.20", "ort-1.19.0"),
                                             ("ort_cast_int_to_bool_chain", "ort-1.20", "ort-1.32")])
def test_the_new_faults_repro_py_exits_1_on_a_bad_release_0_on_a_good_one_2_without_onnxruntime(
        reports, cache_dir, tmp_path, case, bad, good):
    """Issue 42 done-when (repro.py in fresh venvs of a bad release, a good release, and one without
    the engine), for the two faults found here."""
    _, _, found = reports
    folder, _ = found[case]
    assert run_repro(venv_python(cache_dir, bad), folder).returncode == 1
    assert run_repro(venv_python(cache_dir, good), folder).returncode == 0
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare = run_repro(str(tmp_path / "bare" / "bin" / "python"), folder)
    assert bare.returncode == 2 and bare.stdout.startswith("CANNOT RUN: onnxruntime does not import here")
