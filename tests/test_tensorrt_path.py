"""Everything of the TensorRT path that does not need a GPU, tested for real here; the rest is
marked `gpu` and skipped with the reason.

The inspector-JSON tests use layer records written in the documented layout of
IEngineInspector's JSON (that is pure parsing logic); nothing here stands in for a TensorRT run.
"""

import importlib
import json
import shutil
import subprocess
import sys
import textwrap
import types
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest

from conftest import REPO
from matrix.config import ConfigError, load_config
from matrix.prepare.graph_checks import graph_warnings
from matrix.environments.gpus import gpu_missing_reason
from matrix.sources.known_issues import REGISTRY, apply_known_issues, load_registry
from matrix.prepare.layers import node_types
from matrix.prepare import MODEL, case_meta
from matrix.store.records import empty_record
from matrix.environments.staging import stage_worker
from matrix.store import to_frame
from matrix.worker.layer_select import NoMatch, select_layers, select_names
from matrix.worker.probe import describe
from matrix.worker.trt_dtypes import fit_inputs
from matrix.worker.trt_inspection import check_fp32_layers, onnx_origins

PROFILES = load_config(REPO / "matrix.toml").profiles


def profile(name):
    return PROFILES[name].model_dump(mode="json")


def layers_of(prepared, case):
    _, done = prepared
    artifacts = next(path for (name, _), path in done.items() if name == case)
    return list(node_types(onnx.load(str(artifacts / MODEL))).items())


# --- op type / glob → exact layer names on real exports of the seed cases --------------------

def test_layernorm_by_op_type_by_glob_and_by_exact_names_select_the_same_layers(prepared):
    layers = layers_of(prepared, "layernorm_block")
    by_type = select_names(layers, profile("fp16-layernorm-fp32")["keep_fp32"])
    by_glob = select_names(layers, profile("fp16-layernorm-glob")["keep_fp32"])
    assert by_type == by_glob == ["/norms.0/LayerNormalization", "/norms.1/LayerNormalization", "/final/LayerNormalization"]
    # The exact-name profile of the default matrix names depth-4 layers; this export has depth 2.
    with pytest.raises(NoMatch, match="/norms.2/LayerNormalization"):
        select_names(layers, profile("fp16-layernorm-exact")["keep_fp32"])


def test_trtexec_style_wildcard_matches_nothing_in_a_modern_export(prepared):
    """Seed 004's `LayerNormalization_*` names come from old exporters; torch 2 names nodes
    `/norms.0/LayerNormalization`. Resolving before the build says so instead of ignoring it."""
    with pytest.raises(NoMatch, match="LayerNormalization_"):
        select_names(layers_of(prepared, "layernorm_block"), ["LayerNormalization_*"])


def test_softmax_by_op_type_in_the_mha_block(prepared):
    layers = layers_of(prepared, "mha_transformer_block")
    softmax = [name for name, op in layers if op == "Softmax"]
    assert len(softmax) == 1
    assert select_names(layers, ["Softmax"]) == softmax


def test_layers_without_an_onnx_node_are_selected_by_glob_only():
    layers = [("/attn/Softmax", "Softmax"), ("(Unnamed Layer* 7) [Shuffle]", None)]
    assert select_names(layers, ["*Shuffle*"]) == ["(Unnamed Layer* 7) [Shuffle]"]
    assert select_names(layers, ["Softmax"]) == ["/attn/Softmax"]


# --- the SDPA scale pattern of seed 003, on the real torch.onnx export ------------------------

def test_sdpa_export_is_flagged_and_its_explicit_twin_is_not(prepared):
    _, done = prepared
    meta = {case: case_meta(path) for (case, _), path in done.items()}
    assert len(meta["sdpa_attention"]["graph_warnings"]) == 1
    assert "split across Q and K" in meta["sdpa_attention"]["graph_warnings"][0]["text"]
    assert meta["explicit_attention"]["graph_warnings"] == []
    assert meta["gemm_mha_fp16"]["graph_warnings"] == []


def test_whole_scale_on_q_is_not_flagged(prepared):
    """Seed 003's fix: put the whole scale on Q and 1 on K. Edit the real export the same way."""
    _, done = prepared
    artifacts = next(path for (name, _), path in done.items() if name == "sdpa_attention")
    model = onnx.load(str(artifacts / MODEL))
    k_scale = next(n for n in model.graph.node if n.name == "/Mul_1")
    for node in model.graph.node:  # bypass K's Mul: MatMul reads K^T directly
        node.input[:] = [k_scale.input[0] if name == k_scale.output[0] else name for name in node.input]
    model.graph.node.remove(k_scale)
    assert graph_warnings(model) == []


# --- engine inspection: requested FP32 layers against what the engine did ---------------------

def io(dtype_text, key="Format/Datatype"):
    return [{"Name": "t", "Dimensions": [1, 8], key: dtype_text}]


def test_layers_that_ran_in_fp32_are_honoured():
    engine = [{"Name": "/final/LayerNormalization", "LayerType": "Normalization",
               "Outputs": io("Row major linear FP32 format")}]
    summary, details = check_fp32_layers(engine, ["/final/LayerNormalization"])
    assert summary == "ok: 1/1 requested FP32 layers ran in FP32"
    assert details[0]["precision"] == "fp32" and details[0]["fused"] is False


def test_a_requested_layer_that_ran_in_fp16_is_reported_not_honoured():
    engine = [{"Name": "/norms.0/LayerNormalization + /mlps.0/MatMul", "LayerType": "CaskGemm",
               "Outputs": io("Row major linear FP16 format")},
              {"Name": "/final/LayerNormalization", "LayerType": "Normalization", "Outputs": io("Float", "Datatype")}]
    summary, details = check_fp32_layers(engine, ["/norms.0/LayerNormalization", "/final/LayerNormalization"])
    assert summary.startswith("NOT HONOURED: 1/2") and "/norms.0/LayerNormalization" in summary
    assert [d["precision"] for d in details] == ["fp16", "fp32"]


def test_layers_inside_a_myelin_region_are_unverified_not_ok():
    """Seed 004: LayerNorm fused into a Myelin region; the region's name lists its first and last
    layer only, TensorRT 10 lists all members in Metadata."""
    engine = [{"Name": "{ForeignNode[/norms.0/LayerNormalization.../final/LayerNormalization]}",
               "LayerType": "Myelin", "Outputs": io("Row major linear FP32 format"),
               "Metadata": "[ONNX Layer: /norms.0/LayerNormalization]\x1e[ONNX Layer: /norms.1/LayerNormalization]"}]
    summary, details = check_fp32_layers(
        engine, ["/norms.0/LayerNormalization", "/norms.1/LayerNormalization", "/final/LayerNormalization"])
    assert summary.startswith("UNVERIFIED: 3/3")
    assert all(d["fused"] and d["precision"] is None for d in details)


def test_a_requested_layer_missing_from_the_engine_is_absent():
    _, details = check_fp32_layers([], ["/gone"])
    assert details[0]["verdict"] == "absent"


def test_a_layer_the_engine_lists_only_by_its_onnx_node_is_found_through_it():
    """The parser's second layer of a node (`<node>_1`) has no name of its own in a Myelin region."""
    engine = [{"Name": "{ForeignNode[/attn/MatMul.../attn/MatMul_1]}", "LayerType": "Myelin",
               "Metadata": "[ONNX Layer: /attn/MatMul]\x1f[ONNX Layer: /attn/Softmax | Local Function: Attention]"}]
    _, details = check_fp32_layers(engine, ["/attn/Softmax_1"], {"/attn/Softmax_1": ["/attn/Softmax"]})
    assert details[0]["verdict"] == "fused"
    assert check_fp32_layers(engine, ["/attn/Softmax_1"])[1][0]["verdict"] == "absent"


# --- keep_fp32 through the ONNX nodes TensorRT layers came from ---------------------------------

def test_metadata_names_the_onnx_nodes_without_their_properties():
    """onnx-tensorrt writes `[ONNX Layer: <node> | <property> | ...]`, several once fused."""
    text = "[ONNX Layer: /attn/Softmax | Local Function: Attention]\x1e[ONNX Layer: /norm/LayerNormalization]"
    assert onnx_origins(text) == ["/attn/Softmax", "/norm/LayerNormalization"]
    assert onnx_origins("") == onnx_origins(None) == []


def trt10_layers(nodes):
    """Layers as TensorRT 10's parser makes them for ONNX nodes: the first named after the node, the
    next `<node>_1`, a helper `ONNXTRT_...`; every one's metadata names its node."""
    layers = []
    for index, node in enumerate(nodes):
        meta = "[ONNX Layer: {}]".format(node)
        layers += [(node, meta, ["FLOAT"]), (node + "_1", meta, ["FLOAT"]),
                   ("ONNXTRT_ShapeShuffle_{}".format(index), meta, ["INT64"])]
    return layers


def test_op_types_select_every_floating_layer_of_their_nodes_on_a_real_export(prepared):
    node_types = dict(layers_of(prepared, "layernorm_block"))
    norms = [name for name, op in node_types.items() if op == "LayerNormalization"]
    layers = trt10_layers(node_types)
    selected = select_layers(layers, node_types, ["LayerNormalization"])
    assert selected == [name for node in norms for name in (node, node + "_1")]
    # Matching layer names against ONNX node names (the old rule) misses every `<node>_1` layer.
    assert select_names([(name, node_types.get(name)) for name, _, _ in layers], ["LayerNormalization"]) == norms


def test_a_layer_named_unlike_any_node_is_selected_through_its_metadata():
    layers = [("ONNXTRT_Broadcast_7", "[ONNX Layer: /attn/Softmax | Local Function: Attention]", ["HALF"]),
              ("/other/Add", "[ONNX Layer: /other/Add]", ["HALF"])]
    node_types = {"/attn/Softmax": "Softmax", "/other/Add": "Add"}
    assert select_layers(layers, node_types, ["Softmax"]) == ["ONNXTRT_Broadcast_7"]
    assert select_layers(layers, node_types, ["/attn/*"]) == ["ONNXTRT_Broadcast_7"]
    assert select_layers(layers, node_types, ["ONNXTRT_*"]) == ["ONNXTRT_Broadcast_7"]  # its own name too


def test_before_tensorrt_10_a_layer_is_the_node_of_its_own_name():
    layers = [("/attn/Softmax", "", ["FLOAT"]), ("(Unnamed Layer* 7) [Shuffle]", "", ["FLOAT"])]
    node_types = {"/attn/Softmax": "Softmax"}
    assert select_layers(layers, node_types, ["Softmax"]) == ["/attn/Softmax"]
    assert select_layers(layers, node_types, ["*Shuffle*"]) == ["(Unnamed Layer* 7) [Shuffle]"]


def test_a_pattern_that_selects_nothing_is_reported_by_name():
    layers = trt10_layers(["/attn/Softmax"])
    with pytest.raises(NoMatch, match="'LayerNormalization_\\*'"):
        select_layers(layers, {"/attn/Softmax": "Softmax"}, ["Softmax", "LayerNormalization_*"])
    with pytest.raises(NoMatch, match="'ONNXTRT_\\*'"):  # only an INT64 shape layer: nothing to hold in FP32
        select_layers(layers, {"/attn/Softmax": "Softmax"}, ["ONNXTRT_*"])


# --- the TensorRT glue, against a stand-in `tensorrt` module (no TensorRT here) -----------------

class DataType:
    def __init__(self, name):
        self.name = name


class Output:
    def __init__(self, dtype):
        self.dtype = dtype


class Layer:
    """What _apply_layer_settings touches of a network layer: name, precision, outputs."""

    def __init__(self, name, *dtypes):
        self.name, self.outputs, self.precision, self.output_types = name, [Output(d) for d in dtypes], None, {}
        self.num_outputs = len(dtypes)

    def get_output(self, index):
        return self.outputs[index]

    def set_output_type(self, index, dtype):
        self.output_types[index] = dtype


@pytest.fixture
def trt_engine(monkeypatch):
    """The real tensorrt_engine module, imported against a stand-in `tensorrt` (Polygraphy is real)."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "10.8.0.43"
    trt.float32, trt.float16, trt.int32, trt.int64 = (DataType(n) for n in ("FLOAT", "HALF", "INT32", "INT64"))
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the module appends the staged Polygraphy
    engine = importlib.import_module("matrix.worker.engines.tensorrt_engine")
    yield engine, trt
    sys.modules.pop(engine.__name__)


def test_only_floating_outputs_of_a_kept_layer_are_forced_to_fp32(trt_engine):
    engine, trt = trt_engine
    topk, softmax = Layer("/topk/TopK", trt.float16, trt.int32), Layer("/attn/Softmax", trt.float16)
    engine._apply_layer_settings([topk, softmax, Layer("/other", trt.float16)],
                                 {"layer_precisions": {"/topk/TopK": "FLOAT", "/attn/Softmax": "FLOAT"}})
    assert topk.precision is softmax.precision is trt.float32
    assert topk.output_types == {0: trt.float32}  # the INT32 indices keep their type
    assert softmax.output_types == {0: trt.float32}


def test_the_worker_reports_the_polygraphy_it_runs_with(trt_engine):
    info = describe("tensorrt")
    assert info["engine_version"] == "10.8.0.43"
    assert info["polygraphy_version"] == version("polygraphy")


# --- int64 inputs against INT32 bindings (TensorRT before 10) ------------------------------------

def test_int64_inputs_are_cast_for_int32_bindings_and_pass_polygraphys_own_check():
    from polygraphy.backend.base.util import check_inputs
    from polygraphy.common import TensorMetadata
    from polygraphy.datatype import DataType as PolygraphyType
    from polygraphy.exception import PolygraphyException

    ids = np.array([[0, 9, 250001, 2]], dtype=np.int64)  # BGE's input_ids: vocabulary of 250002
    binding = TensorMetadata().add("input_ids", PolygraphyType.INT32, (1, 4))
    with pytest.raises(PolygraphyException, match="unexpected dtype"):
        check_inputs({"input_ids": ids}, binding)  # what TrtRunner.infer does with the raw array
    fed, casts = fit_inputs({"input_ids": ids}, {"input_ids": "INT32"})
    check_inputs(fed, binding)
    assert fed["input_ids"].dtype == np.int32 and (fed["input_ids"] == ids).all()
    assert casts == ["input_ids: int64 -> int32 (the engine's binding is INT32; values fit)"]


def test_int64_inputs_stay_for_int64_bindings_and_values_outside_int32_are_an_error():
    ids = np.array([[1, 2 ** 40]], dtype=np.int64)
    fed, casts = fit_inputs({"input_ids": ids, "x": np.ones(2, np.float32)}, {"input_ids": "INT64", "x": "FLOAT"})
    assert fed["input_ids"] is ids and casts == []  # TensorRT 10 binds INT64 as it is
    with pytest.raises(ValueError, match=r"'input_ids' is int64 with values in \[1, 1099511627776\], outside int32"):
        fit_inputs({"input_ids": ids}, {"input_ids": "INT32"})


# --- the known-issue registry ------------------------------------------------------------------

def records(**overrides):
    base = dict(case="bge_reranker", params={"batch": 4}, profile="fp32", engine="tensorrt",
                engine_version="8.6.1.6", status="fail", gpu="NVIDIA GeForce RTX 3070")
    base.update(overrides)
    record = empty_record(**base)
    record["verdict"] = record["status"]
    return record


@pytest.fixture(scope="module")
def registry():
    return load_registry(REPO / "cases" / REGISTRY)


def test_registry_names_real_cases_and_profiles(registry):
    """Every entry's case runs, with all its profiles, in the default matrix or one of matrices/."""
    configs = [load_config(path) for path in [REPO / "matrix.toml", *sorted((REPO / "matrices").glob("*.toml"))]]
    seeds = {issue.id.split("-")[1] for issue in registry if issue.id.startswith("seed-")}
    assert seeds == {"000", "001", "002", "003", "004"}  # one entry per seed problem of ../shared/seeds
    for issue in registry:
        assert any(issue.case in config.cases and set(issue.profiles) <= set(config.cases[issue.case].profiles)
                   for config in configs), issue.id


def test_known_issue_turns_expected_failures_into_xfail_and_fixed_ones_into_xpass(registry):
    frame = apply_known_issues(to_frame([
        records(),                                                   # 8.6, batch 4, fails: known
        records(status="pass"),                                      # 8.6, batch 4, passes: xpass
        records(engine_version="10.0.1.6"),                          # fixed version: a real failure
        records(params={"batch": 1}),                                # batch 1 is not affected
        records(engine="onnxruntime", engine_version="1.17.3"),      # other engine
        records(case="sdpa_attention", params={"batch": 1}, engine_version="10.7.0.23", gpu="NVIDIA L4"),
        records(case="sdpa_attention", params={"batch": 1}, engine_version="10.7.0.23", gpu="NVIDIA A100"),
        records(case="gemm_mha_fp16", params={"batch": 1}, profile="fp16", engine_version="10.0.0b6"),
        records(status="skipped"),
    ]), registry)
    assert list(frame["status"]) == ["xfail", "xpass", "fail", "fail", "fail", "xfail", "fail", "xfail", "skipped"]
    assert list(frame["verdict"]) == ["fail", "pass", "fail", "fail", "fail", "fail", "fail", "fail", "skipped"]
    assert frame["known_issue"][0] == "seed-002-bge-batch4"
    assert "1.0019" in frame["reported"][0] and "issues/3827" in frame["reported"][0]
    assert pd.isna(frame["known_issue"][2])


def test_a_bad_registry_is_a_config_error(tmp_path):
    bad = tmp_path / REGISTRY
    bad.write_text('[[issue]]\nid = "x"\ntitle = "t"\ncase = "c"\nprofiles = ["fp16"]\n'
                   'engine = "tensorrt"\nversions = "about 8.6"\nsource = "s"\n')
    with pytest.raises(ConfigError) as err:
        load_registry(bad)
    assert err.value.key == "issue.0.versions"


# --- the worker's TensorRT modules on a real Python 3.8 ----------------------------------------

def python38():
    """A working Python 3.8 (pyenv shims may exist without working), or None."""
    candidates = [shutil.which("python3.8"), *map(str, Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


PY38 = python38()


@pytest.mark.skipif(PY38 is None, reason="no working Python 3.8 interpreter on this host")
def test_pure_tensorrt_modules_run_on_python_38(tmp_path):
    home = stage_worker(tmp_path)
    script = textwrap.dedent("""
        import json
        from trtmatrix_worker.layer_select import select_layers, select_names
        from trtmatrix_worker.trt_settings import builder_settings
        from trtmatrix_worker.trt_inspection import check_fp32_layers
        from trtmatrix_worker.trt_dtypes import fit_inputs
        names = select_names([("/a/Softmax", "Softmax"), ("/b/MatMul", "MatMul")], ["Softmax"])
        layers = select_layers([("L7", "[ONNX Layer: /a/Softmax]", ["HALF", "INT32"])], {"/a/Softmax": "Softmax"},
                               ["Softmax"])
        settings = builder_settings({"precision": "fp16", "optimization": "on"}, names)
        print(json.dumps([names, layers, settings["precision_constraints"], check_fp32_layers([], names)[0],
                          fit_inputs({}, {})]))
        """)
    out = subprocess.run([PY38, "-c", script], env={"PYTHONPATH": str(home)}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [["/a/Softmax"], ["L7"], "obey", "ok: 0/1 requested FP32 layers ran in FP32",
                                      [{}, []]]


# --- real TensorRT: only on a GPU host ------------------------------------------------------------

def tensorrt_missing_reason():
    """trt-10.8 is an NGC image: it needs a GPU and a Docker engine (the H100 host has no Docker)."""
    from matrix.environments.backend import EnvironmentUnavailable
    from matrix.environments.images import docker_client

    if gpu_missing_reason():
        return gpu_missing_reason()
    try:
        docker_client()
    except EnvironmentUnavailable as exc:
        return f"trt-10.8 runs in a Docker image: {exc}"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(tensorrt_missing_reason() is not None, reason=f"needs an NVIDIA GPU and Docker for TensorRT: {tensorrt_missing_reason()}")
def test_tensorrt_environment_runs_the_seed_cases(write_matrix):
    from matrix.plan import build_plan
    from matrix.run import MatrixRun
    from matrix.store import read_run

    config = write_matrix("""
        [profiles.fp32]
        precision = "fp32"
        [profiles.fp16-layernorm-fp32]
        precision = "fp16"
        keep_fp32 = ["LayerNormalization"]
        [cases.layernorm_block]
        profiles = ["fp32", "fp16-layernorm-fp32"]
        """, environments=("trt-10.8",), timeout_s=1800)
    frame = read_run(MatrixRun(build_plan(config)).execute()).set_index("profile")
    fp32, fp16 = frame.loc["fp32"], frame.loc["fp16-layernorm-fp32"]
    assert fp32["engine_version"].startswith("10.8") and fp32["gpu"]
    # Strict FP32 (no TF32) against the float64 reference: the matrix file's FP32 tolerance holds.
    assert fp32["status"] == "pass" and fp32["max_abs"] <= 1e-4 and fp32["nan_count"] == 0
    # FP16 is measurably coarser than FP32, and still finite.
    assert fp32["max_abs"] < fp16["max_abs"] < 1.0 and fp16["nan_count"] == 0
    # The inspector reported on the layers of every LayerNormalization node (4 blocks + final): the
    # first layer of a node bears its name; from TensorRT 10 its further layers are held in FP32 too.
    details = json.loads(fp16["layer_precisions"])
    assert fp16["precision_check"].split(":")[0] in ("ok", "NOT HONOURED", "UNVERIFIED")
    nodes = {f"/norms.{i}/LayerNormalization" for i in range(4)} | {"/final/LayerNormalization"}
    assert nodes <= {d["layer"] for d in details}


def test_the_report_marks_cells_whose_fp32_layers_did_not_run_in_fp32():
    from matrix.report.html import key_number

    row = {"max_abs": 0.25, "status": "fail"}
    assert key_number(pd.Series({**row, "precision_check": "NOT HONOURED: 5/5 requested FP32 layers ..."})) == "2.5e-01 ⚠"
    assert key_number(pd.Series({**row, "precision_check": "UNVERIFIED: 5/5 ..."})) == "2.5e-01 ⚠"
    assert key_number(pd.Series({**row, "precision_check": "ok: 5/5 requested FP32 layers ran in FP32"})) == "2.5e-01"
