"""Prepared artifacts are real exports whose float64 references agree with the exported graph."""

import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd

from conftest import REPO, SMALL
from matrix.plan import build_plan
from matrix.environments.definitions import load_envdef
from matrix.prepare import INPUTS, MODEL, REFERENCE, model_for_profile, prepare
from matrix.prepare.fingerprint import option_files, variant_key
from matrix.prepare.graph_checks import applies, graph_warnings
from matrix.run import MatrixRun
from matrix.store import PARQUET



def test_every_seed_case_and_parameter_is_prepared(prepared):
    plan, done = prepared
    assert {case for case, _ in done} == set(SMALL)
    assert {dict(p)["batch"] for case, p in done if case == "bge_reranker"} == {1, 4}


def test_reference_is_float64_and_agrees_with_the_exported_graph(prepared):
    _, done = prepared
    for (case, params), directory in done.items():
        session = ort.InferenceSession(str(directory / MODEL), providers=["CPUExecutionProvider"])
        with np.load(directory / INPUTS) as inputs, np.load(directory / REFERENCE) as reference:
            outputs = session.run(None, dict(inputs))
            assert all(reference[name].dtype == np.float64 for name in reference.files)
            for value, name in zip(outputs, reference.files):
                np.testing.assert_allclose(value, reference[name], atol=1e-4, rtol=1e-3, err_msg=case)


def test_prepare_is_cached_by_content(prepared):
    plan, done = prepared
    cell = plan.cells[0]
    directory = done[(cell.case, cell.params)]
    before = (directory / MODEL).stat().st_mtime_ns
    assert prepare(plan.cases[cell.case], cell.params, cell.artifact_key, plan.path("cache_dir")) == directory
    assert (directory / MODEL).stat().st_mtime_ns == before


def test_bge_batches_share_a_dynamic_graph(prepared):
    _, done = prepared
    dims = []
    for (case, params), directory in done.items():
        if case == "bge_reranker":
            graph = onnx.load(str(directory / MODEL)).graph
            dims.append([d.dim_param for d in graph.input[0].type.tensor_type.shape.dim])
    assert dims == [["batch", "sequence"], ["batch", "sequence"]]


def test_fp16_variant_keeps_softmax_in_fp32(prepared):
    plan, done = prepared
    directory = next(d for (case, _), d in done.items() if case == "mha_transformer_block")
    variant = onnx.load(str(model_for_profile(directory, plan.config.profiles["fp16-softmax-fp32"], "onnxruntime")))
    softmax_inputs = {n.input[0] for n in variant.graph.node if n.op_type == "Softmax"}
    casts_to_fp32 = {n.output[0] for n in variant.graph.node
                     if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT}
    assert softmax_inputs and softmax_inputs <= casts_to_fp32
    plain = onnx.load(str(model_for_profile(directory, plan.config.profiles["fp16"], "onnxruntime")))
    assert {i.data_type for i in plain.graph.initializer if i.dims} == {onnx.TensorProto.FLOAT16}


def test_fp16_copies_are_named_by_their_variant_key_and_other_engines_run_the_export(prepared):
    """The key holds the host converter's version: another onnxruntime makes another copy. FP16
    runs as a copy on onnxruntime and on strongly typed TensorRT (TensorRT-RTX always; full
    TensorRT with `typing = "strong"`); weakly typed TensorRT builds the export with FP16 flags."""
    plan, done = prepared
    directory = next(d for (case, _), d in done.items() if case == "layernorm_block")
    fp16, fp32 = plan.config.profiles["fp16"], plan.config.profiles["fp32"]
    ort, trt, rtx = (load_envdef(REPO / "images" / f"{name}.toml") for name in ("ort-1.20", "trt-10.8", "trt-rtx-1.7"))
    strong = fp16.model_copy(update={"typing": "strong"})
    assert ort.runs_fp16_copy(fp16) and rtx.runs_fp16_copy(fp16) and trt.runs_fp16_copy(strong)
    assert not trt.runs_fp16_copy(fp16) and not rtx.runs_fp16_copy(fp32) and not ort.runs_fp16_copy(fp32)
    key = variant_key(fp16, ort.runs_fp16_copy(fp16))
    assert model_for_profile(directory, fp16, True).name == f"model.fp16-{key[:16]}.onnx"
    assert model_for_profile(directory, fp16, False) == directory / MODEL
    assert variant_key(fp16, False) is None


def test_option_files_are_the_existing_paths_that_options_name(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "onnx").mkdir(parents=True)
    (checkpoint / ".git").mkdir()
    weights, pack = checkpoint / "onnx" / "weights.bin", checkpoint / ".git" / "pack"
    weights.write_bytes(b"1")
    pack.write_bytes(b"1")
    options = {"checkpoint": str(checkpoint), "config": {"files": [str(weights)], "sep": "/", "prefix": ""},
               "dtype": "fp16", "missing": str(tmp_path / "nowhere")}
    found = option_files(options)
    assert set(found) == {str(checkpoint), str(weights)}  # words, "/", "" and missing paths name no file

    pack.write_bytes(b"2")  # hidden files (.git, .cache) are not the checkpoint
    os.utime(pack, ns=(1, 1))
    assert option_files(options) == found
    os.utime(weights, ns=(2, 2))  # touched, same content
    assert option_files(options) == found
    weights.write_bytes(b"2")
    os.utime(weights, ns=(3, 3))
    assert option_files(options)[str(checkpoint)] != found[str(checkpoint)]


def test_onnx_file_case_reference_from_the_onnx_reference_evaluator(write_matrix, tiny_model):
    model, inputs = tiny_model
    config = write_matrix(f'[profiles.fp32]\nprecision = "fp32"\n[cases.tiny]\nonnx = "{model}"\n'
                          f'inputs = "{inputs}"\nprofiles = ["fp32"]\n', environments=("ort-1.32",))
    plan = build_plan(config)
    cell = plan.cells[0]
    directory = prepare(plan.cases["tiny"], cell.params, cell.artifact_key, plan.path("cache_dir"))
    graph = onnx.load(str(model)).graph
    weights = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in graph.initializer}
    with np.load(inputs) as x, np.load(directory / REFERENCE) as reference:
        truth = np.tanh(x["x"].astype(np.float64) @ weights["W"] + weights["b"])
        np.testing.assert_allclose(reference["y"], truth, atol=1e-6)


def test_a_broken_case_does_not_stop_the_others(write_matrix, tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "cases.py").write_text(
        "import torch\nfrom matrix.case import case\n\n"
        "@case()\ndef broken():\n    raise RuntimeError('cannot build <this>')\n\n"
        "@case()\ndef fine():\n    return torch.nn.Linear(4, 3), {'x': torch.randn(2, 4)}\n")
    config = write_matrix('[profiles.fp32]\nprecision = "fp32"\n[cases.broken]\nprofiles = ["fp32"]\n'
                          '[cases.fine]\nprofiles = ["fp32"]\n', cases_dir=cases)
    frame = pd.read_parquet(MatrixRun(build_plan(config)).execute() / PARQUET).set_index("cell_id")
    assert frame.loc["broken/fp32/ort-1.17", "status"] == "error"
    assert "prepare failed: RuntimeError: cannot build <this>" in frame.loc["broken/fp32/ort-1.32", "error"]
    assert frame.loc["fine/fp32/ort-1.17", "status"] == "pass"
    assert frame.loc["fine/fp32/ort-1.32", "status"] == "pass"


def test_graph_warnings_and_raw_verdicts_reach_the_records(write_matrix):
    config = write_matrix(f"""
        [profiles.fp32]
        precision = "fp32"
        [cases.sdpa_attention]
        profiles = ["fp32"]
        options = {SMALL["sdpa_attention"]}
        [cases.explicit_attention]
        profiles = ["fp32"]
        options = {SMALL["explicit_attention"]}
        """, environments=("ort-1.32",))
    run_dir = MatrixRun(build_plan(config)).execute()
    frame = pd.read_parquet(run_dir / PARQUET).set_index("case")
    # Said once per case (the report, above the matrix), on the cells of TensorRT 10.7 only: not on
    # every onnxruntime cell of the model.
    said = json.loads(frame.loc["sdpa_attention", "model_checks"])
    assert len(said) == 1 and "split across Q and K at /MatMul (/Mul on Q, /Mul_1 on K)" in said[0]
    assert frame["graph_warnings"].isna().all() and pd.isna(frame.loc["explicit_attention", "model_checks"])
    assert (run_dir / "report.html").read_text().count("split across Q and K") == 1
    warning = graph_warnings(onnx.load(str(build_plan(config).path("cache_dir") / "artifacts" / frame.loc["sdpa_attention", "artifact"]
                                           / "model.onnx")))[0]
    assert [applies(warning, engine, version) for engine, version in
            (("tensorrt", "10.7.0.23"), ("tensorrt", "10.8.0.43"), ("tensorrt", "1.7.1.116"), ("onnxruntime", "10.7"))] \
        == [True, False, False, False]
    assert list(frame["verdict"]) == list(frame["status"]) == ["pass", "pass"]  # no known issue on onnxruntime
    assert frame["known_issue"].isna().all()


def test_the_files_and_folders_a_case_reads_are_kept_and_a_change_is_seen(tmp_path):
    """Issue 41, fourth sweep, 8: a build that globs its shards kept a stale pass when a shard was
    added; folders the import system lists (sys.path) are not the case's."""
    import glob
    import importlib

    from matrix.prepare.files_read import changed_since, files_read, recording

    shards = tmp_path / "shards"
    shards.mkdir()
    np.save(shards / "a.npy", np.ones(3))
    (tmp_path / "beside_module.py").write_text("X = 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with recording():
            [np.load(path) for path in sorted(glob.glob(str(shards / "*.npy")))]
            importlib.import_module("beside_module")
    finally:
        sys.path.remove(str(tmp_path))
    kept = {path: entry for path, entry in files_read(skip=tmp_path / "cache").items() if path.startswith(str(tmp_path))}
    assert kept[str(shards)] == {"listing": ["a.npy"]} and str(shards / "a.npy") in kept
    assert str(tmp_path) not in kept  # listed by the import system, not by the case
    assert changed_since(kept) is None
    np.save(shards / "b.npy", np.ones(3))
    assert changed_since(kept) == str(shards)
