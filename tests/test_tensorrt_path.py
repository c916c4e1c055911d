"""Everything of the TensorRT path that does not need a GPU, tested for real here; the rest is
marked `gpu` and skipped with the reason.

The inspector-JSON tests use layer records written in the documented layout of
IEngineInspector's JSON (that is pure parsing logic); nothing here stands in for a TensorRT run.
"""

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import onnx
import pandas as pd
import pytest

from conftest import REPO
from matrix.config import ConfigError, load_config
from matrix.graph_checks import graph_warnings
from matrix.gpus import gpu_missing_reason
from matrix.known_issues import REGISTRY, apply_known_issues, load_registry
from matrix.layers import node_types
from matrix.prepare import MODEL, case_meta
from matrix.records import empty_record
from matrix.staging import stage_worker
from matrix.store import to_frame
from matrix.worker.layer_select import NoMatch, select_names
from matrix.worker.trt_inspection import check_fp32_layers
from matrix.worker.trt_settings import builder_settings

PROFILES = load_config(REPO / "matrix.toml").profiles


def profile(name):
    return PROFILES[name].model_dump(mode="json")


def layers_of(prepared, case):
    _, done = prepared
    artifacts = next(path for (name, _), path in done.items() if name == case)
    return list(node_types(onnx.load(str(artifacts / MODEL))).items())


# --- profile → builder settings ------------------------------------------------------------

def test_fp32_profile_means_strict_fp32():
    settings = builder_settings(profile("fp32"), [])
    assert (settings["fp16"], settings["tf32"], settings["precision_constraints"]) == (False, False, None)
    assert settings["layer_precisions"] == {} and "builder_optimization_level" not in settings


def test_fp16_with_fp32_layers_obeys_constraints_on_exactly_those_layers():
    names = ["/norms.0/LayerNormalization", "/final/LayerNormalization"]
    settings = builder_settings(profile("fp16-layernorm-fp32"), names)
    assert settings["fp16"] is True and settings["precision_constraints"] == "obey"
    assert settings["layer_precisions"] == dict.fromkeys(names, "FLOAT")
    assert settings["layer_output_types"] == dict.fromkeys(names, "FLOAT")
    assert settings["profiling_verbosity"] == "DETAILED"


def test_optimisations_off_is_the_lowest_builder_level():
    assert builder_settings(profile("fp32-noopt"), [])["builder_optimization_level"] == 0


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
    assert "split across Q" in meta["sdpa_attention"]["graph_warnings"][0]
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
    config = load_config(REPO / "matrix.toml")
    assert {issue.id.split("-")[1] for issue in registry} == {"000", "001", "002", "003", "004"}
    for issue in registry:
        assert issue.case in config.cases, issue.id
        assert set(issue.profiles) <= set(config.cases[issue.case].profiles), issue.id


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
        from trtmatrix_worker.layer_select import select_names
        from trtmatrix_worker.trt_settings import builder_settings
        from trtmatrix_worker.trt_inspection import check_fp32_layers
        names = select_names([("/a/Softmax", "Softmax"), ("/b/MatMul", "MatMul")], ["Softmax"])
        settings = builder_settings({"precision": "fp16", "optimization": "on"}, names)
        print(json.dumps([names, settings["precision_constraints"], check_fp32_layers([], names)[0]]))
        """)
    out = subprocess.run([PY38, "-c", script], env={"PYTHONPATH": str(home)}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [["/a/Softmax"], "obey", "ok: 0/1 requested FP32 layers ran in FP32"]


# --- real TensorRT: only on a GPU host ------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(gpu_missing_reason() is not None, reason=f"needs an NVIDIA GPU with TensorRT: {gpu_missing_reason()}")
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
    assert frame.loc["fp32", "engine_version"].startswith("10.8")
    assert frame.loc["fp32", "status"] == "pass"
    assert frame.loc["fp16-layernorm-fp32", "precision_check"]  # the engine inspector said something


def test_the_report_marks_cells_whose_fp32_layers_did_not_run_in_fp32():
    from matrix.report import key_number

    row = {"max_abs": 0.25, "status": "fail"}
    assert key_number(pd.Series({**row, "precision_check": "NOT HONOURED: 5/5 requested FP32 layers ..."})) == "2.5e-01 ⚠"
    assert key_number(pd.Series({**row, "precision_check": "UNVERIFIED: 5/5 ..."})) == "2.5e-01 ⚠"
    assert key_number(pd.Series({**row, "precision_check": "ok: 5/5 requested FP32 layers ran in FP32"})) == "2.5e-01"
