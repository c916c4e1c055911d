"""The models and case files of the seventh and eighth sweeps' verdict tests (issue 41), built into
one folder and one matrix per environment: each `trtmatrix run` pays its plan, its case files'
import and its worker's start once, so the tests that only read their cells share one run
(conftest's `sweep_run_120` and `sweep_run_132`). Tests that stop, kill or re-judge a run keep
their own."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import BF16, matrix_file
from matrix.store import list_runs, read_run
from test_bad_values import TRTMATRIX
from test_reference_check import PROFILES, case, model


@dataclass(frozen=True)
class SharedRun:
    """A finished `trtmatrix run` of one matrix: its file, its process's end and its run folder."""
    folder: Path
    config: Path
    done: subprocess.CompletedProcess
    run_dir: Path

    def cells(self) -> dict:
        """{case: its fp32 cell's record}."""
        frame = read_run(self.run_dir)
        return frame[frame["profile"] == "fp32"].set_index("case").to_dict("index")


def shared_run(folder: Path, cache_dir: Path, body: str, env: str, cases: dict[str, str]) -> SharedRun:
    """One `trtmatrix run` of `body` in `env`, the case files `cases` ({file name: text}) in its cases_dir."""
    cases_dir = folder / "cases"
    cases_dir.mkdir()
    for name, text in cases.items():
        (cases_dir / name).write_text(text)
    config = matrix_file(folder, cache_dir, body, environments=(env,), cases_dir=cases_dir)
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "250"})
    runs = list_runs(folder / "reports")
    assert runs, done.stderr
    return SharedRun(folder, config, done, runs[-1])


# --- onnxruntime 1.20: sweep 8 A2, A7, A12 (verdicts), A14-A16 (partings), sweep 7 N12, N5 ----------

TIES = '''\
import torch
from matrix.case import Export, case


class Greater(torch.nn.Module):
    def forward(self, x):
        return x > 0.3


class TopTwo(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, 2)


@case()
def gt_const():
    """0.3f > 0.3 in float64 (0.300000011920929), not in the export's float32 constant."""
    return Greater(), {"x": torch.tensor([0.3, 0.2, 0.5])}


@case(export=Export(output_names=("values", "indices")))
def topk_tie():
    """Three tied 5s: torch orders them its own way, ONNX's TopK lower index first."""
    return TopTwo(), {"x": torch.tensor([1.0, 5.0, 5.0, 2.0, 5.0, 0.0])}
'''

PARTINGS = '''\
import torch
from matrix.case import case


class Masked(torch.nn.Module):
    def forward(self, x, m):
        return torch.where(x > 0.3, x, torch.zeros_like(x)) + 0 * m


class Root(torch.nn.Module):
    def forward(self, x):
        return torch.sqrt(0.3 - x)


@case()
def masked_where():
    """x = 0.3f > 0.3 in PyTorch's float64, not in the export's (0.3f > 0.3f): only at m = 0."""
    return Masked().eval(), {"x": torch.tensor([[0.3, 0.2, 0.5]]), "m": torch.tensor([[0, 1, 1]])}


@case()
def sqrt_edge():
    """0.3 - 0.3f is -1.2e-8 in PyTorch's float64 (NaN), 0 in the export's (0.3f - 0.3f)."""
    return Root().eval(), {"x": torch.tensor([0.3, 0.2, 0.1])}
'''

NP_CASE = '''\
import random

import numpy as np
import torch
from matrix.case import case


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4, 2))

    def forward(self, x):
        return x @ self.weight


@case(seed=7)
def np_inputs():
    """Inputs drawn with numpy's global generator and Python's random, as many users draw them."""
    return Linear(), {"x": torch.from_numpy((np.random.rand(3, 4) + random.random()).astype(np.float32))}
'''

LOOP_TIMEOUT_S = 3  # the Loop's referee check and its engine both outlast it
SUBNORMAL_X = np.float32([1.2345, 2.5, 3.75])


def _big_loop(path):
    """v += 1, 10**12 times: no referee check (nor engine) ends within a few seconds."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("v_in", T.FLOAT, [2])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [2])],
        [nh.from_array(np.ones(2, np.float32), "one")])
    model(path, [h.make_node("Loop", ["M", "", "v0"], ["v"], body=body)], [("M", T.INT64, []), ("v0", T.FLOAT, [2])],
          [("v", T.FLOAT, [2])], opset=16)


def _while_loop(path):
    """acc += 0.1 while acc < 0.3 (at most 10 times): 0.1f + 0.1f + 0.1f rounds to 0.3f, so float32
    stops after 3 steps; in float64 0.30000000447 < 0.30000001192, a 4th step."""
    body = h.make_graph(
        [h.make_node("Add", ["acc_in", "step"], ["acc_out"]), h.make_node("Less", ["acc_out", "limit"], ["cond_out"]),
         h.make_node("Identity", ["acc_out"], ["each"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("acc_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", T.FLOAT, [1]),
         h.make_tensor_value_info("each", T.FLOAT, [1])],
        [nh.from_array(np.float32([0.1]), "step"), nh.from_array(np.float32([0.3]), "limit")])
    model(path, [h.make_node("Loop", ["most", "go", "x"], ["acc", "trace"], body=body)], [("x", T.FLOAT, [1])],
          [("acc", T.FLOAT, [1]), ("trace", T.FLOAT, [None, 1])],
          [nh.from_array(np.int64(10), "most"), nh.from_array(np.array(True), "go")], opset=17)


def _subnormal(path):
    """x * 1e-40 is a float32 subnormal, held to 1.4e-45 (1e-5 of itself); * 1e38 makes it normal again."""
    return model(path, [h.make_node("Mul", ["x", "tiny"], ["a"]), h.make_node("Mul", ["a", "big"], ["y"])],
                 [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
                 [nh.from_array(np.float32(1e-40), "tiny"), nh.from_array(np.float32(1e38), "big")])


def run_120(folder: Path, cache_dir: Path) -> SharedRun:
    """The onnxruntime 1.20 cases of test_sweep_eight_verdicts, test_sweep_eight_partings and
    test_sweep_seven_rounding_leftovers, in one run."""
    model(folder / "cos_inf.onnx", [h.make_node("Add", ["x", "mask"], ["y"])], [("x", T.FLOAT, [1, 4])],
          [("y", T.FLOAT, [1, 4])], [nh.from_array(np.float32([[0, 0, -np.inf, 0]]), "mask")])
    model(folder / "cos_nan.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])])
    model(folder / "cos_one.onnx", [h.make_node("Div", ["x", "d"], ["y"])], [("x", T.FLOAT, [6])],
          [("y", T.FLOAT, [6])], [nh.from_array(np.float32(7), "d")])
    _big_loop(folder / "big_loop.onnx")
    # Where(x * 0.1f >= 0.3f, x, 0) at x = [3, 1, 5]: the step flips at element 0 only ([3, 0, 5] in float32)
    model(folder / "wrong_elsewhere.onnx",
          [h.make_node("Mul", ["x", "tenth"], ["p"]), h.make_node("GreaterOrEqual", ["p", "t"], ["g"]),
           h.make_node("Where", ["g", "x", "zero"], ["y"])], [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
          [nh.from_array(np.float32(0.1), "tenth"), nh.from_array(np.float32(0.3), "t"), nh.from_array(np.float32(0), "zero")])
    _while_loop(folder / "while_loop.onnx")
    _subnormal(folder / "subnormal.onnx")
    rule = "[cases.{}.accept.fp32]\ncosine = 0.99\n"
    body = (PROFILES + BF16 + '[cases.gt_const]\nprofiles = ["fp32"]\n[cases.topk_tie]\nprofiles = ["fp32"]\n'
            + case(folder, "cos_inf", None, {"x": np.float32([[1, 2, 3, 4]])}) + rule.format("cos_inf")
            + case(folder, "cos_nan", None, {"x": np.float32([1, np.nan, 3, 4])}) + rule.format("cos_nan")
            # x / 7 rounded to float32 turns the direction by 3e-16: cosine 1 - 3.3e-16 (division is
            # correctly rounded in any engine)
            + case(folder, "cos_one", None, {"x": np.float32([1, 1.1, 1.3, 1.7, 0.1, 0.01])})
            + "[cases.cos_one.accept.fp32]\ncosine = 1.0\n"
            + case(folder, "big_loop", None, {"M": np.int64(10 ** 12), "v0": np.zeros(2, np.float32)},
                   expected={"v": np.float32([2 ** 24, 2 ** 24])}) + f"timeout_s = {LOOP_TIMEOUT_S}\n"
            + '[cases.masked_where]\nprofiles = ["fp32"]\nmask = "m"\n[cases.sqrt_edge]\nprofiles = ["fp32"]\n'
            + case(folder, "wrong_elsewhere", None, {"x": np.float32([3, 1, 5])}, expected={"y": np.float32([3, 0, 5.5])})
            + case(folder, "while_loop", None, {"x": np.float32([0])}, ("fp32", "bf16"))
            + case(folder, "subnormal", None, {"x": SUBNORMAL_X}) + '[cases.np_inputs]\nprofiles = ["fp32"]\n')
    return shared_run(folder, cache_dir, body, "ort-1.20",
                      {"ties.py": TIES, "partings.py": PARTINGS, "np_inputs.py": NP_CASE})


# --- onnxruntime 1.32: sweep 8 A5, A8, A4 (refusals), A3, A11, A9 (inputs and texts) ----------------

WORDS = np.array(["emu", "cat", "bird"])  # str: dtype <U4, as np.array of Python strings makes it

ODD = '''\
import torch
from matrix.case import case


class Odd(torch.nn.Module):
    def forward(self, x, h):
        x.mul_(2)  # in place: every call changes the tensor it is given
        y = x + 1 + 0 * h  # h: a float16 input, which the case's model takes as float32
        # a bfloat16 output; an FP16 one that is inf on both sides (inf - inf in the reference check)
        return y, y.to(torch.bfloat16), (y * 3).half()


@case()
def odd_module():
    return Odd().train(), {"x": torch.tensor([1.0, 2.0, 30000.0]), "h": torch.tensor([0.5], dtype=torch.float16)}


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, mask):
        return self.attention(x, x, x, key_padding_mask=mask, need_weights=False)[0]


class Scattered(torch.nn.Module):
    def forward(self, x):
        out = torch.zeros(4)  # the default dtype: float32 in the export, float64 in the reference
        out[torch.tensor([0, 2])] = x
        return out


@case()
def made_tensor():
    """Sweep 10 C5: a tensor the module makes, float32 in the float64 reference, failed its index_put."""
    return Scattered(), {"x": torch.tensor([0.1, 0.7])}


@case()
def padded_attention():
    """Sweep 10 C2: exported under no_grad, MultiheadAttention's fused fast path failed the export."""
    torch.manual_seed(0)
    return Attention(), {"x": torch.randn(2, 5, 8), "mask": torch.tensor([[False] * 4 + [True], [False] * 5])}
'''


def save_ml(folder, name: str, nodes, inputs, outputs, feeds, initializers=(), expected=None) -> str:
    """An ONNX-file case `name` (opset 17, ai.onnx.ml 2, IR 8) in one fp32 profile."""
    proto = h.make_model(h.make_graph(nodes, name, inputs, outputs, list(initializers)), ir_version=8,
                         opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 2)])
    onnx.checker.check_model(proto)
    onnx.save(proto, folder / f"{name}.onnx")
    np.savez(folder / f"{name}_in.npz", **feeds)
    entry = f'[cases.{name}]\nonnx = "{folder / f"{name}.onnx"}"\ninputs = "{folder / f"{name}_in.npz"}"\n'
    if expected is not None:
        np.savez(folder / f"{name}_exp.npz", **expected)
        entry += f'expected = "{folder / f"{name}_exp.npz"}"\n'
    return entry + 'profiles = ["fp32"]\n'


def _lowered(folder, name: str, expected=None) -> str:
    """ids → LabelEncoder → StringNormalizer(LOWER) in a locale no host has: onnxruntime cannot make
    the session (what a host without en_US.UTF-8 does to the default locale)."""
    return save_ml(folder, name, [
        h.make_node("LabelEncoder", ["x"], ["s"], domain="ai.onnx.ml", keys_int64s=[0, 1, 2],
                    values_strings=["Cat", "Dog", "Emu"], default_string="?"),
        h.make_node("StringNormalizer", ["s"], ["y"], case_change_action="LOWER", locale="zz_ZZ.UTF-8")],
        [h.make_tensor_value_info("x", T.INT64, [3])],
        [h.make_tensor_value_info("y", T.STRING, [3])], {"x": np.array([2, 0, 1])}, expected=expected)


def _dropout(folder, name: str, training: bool, ratio: float) -> str:
    """y = Dropout(x, ratio, training_mode) with training_mode a BOOL graph input fed `training`."""
    return save_ml(folder, name, [h.make_node("Dropout", ["x", "r", "t"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [8]), h.make_tensor_value_info("t", T.BOOL, [])],
                   [h.make_tensor_value_info("y", T.FLOAT, [8])],
                   {"x": np.arange(1, 9, dtype=np.float32), "t": np.array(training)},
                   [nh.from_array(np.array(ratio, np.float32), "r")])


def encoded(folder, name: str, words: np.ndarray) -> str:
    """A STRING graph input: its ids (LabelEncoder, -1 for an unknown word) and itself (Identity)."""
    return save_ml(folder, name, [
        h.make_node("LabelEncoder", ["x"], ["ids"], domain="ai.onnx.ml", keys_strings=["cat", "dog", "emu"],
                    values_int64s=[0, 1, 2], default_int64=-1),
        h.make_node("Identity", ["x"], ["same"])],
        [h.make_tensor_value_info("x", T.STRING, [3])],
        [h.make_tensor_value_info("ids", T.INT64, [3]), h.make_tensor_value_info("same", T.STRING, [3])], {"x": words})


def _floor_mod(folder, name: str) -> str:
    """y = Mod(x, m) with fmod = 0 on FLOAT: valid ONNX, which onnxruntime's kernel refuses before
    opset 28 whatever the values (sweep 9 B2's model)."""
    return save_ml(folder, name, [h.make_node("Mod", ["x", "m"], ["y"], fmod=0)],
                 [h.make_tensor_value_info("x", T.FLOAT, [4])],
                 [h.make_tensor_value_info("y", T.FLOAT, [4])],
                 {"x": np.array([-0.9, 0.9, 0.9, -1.0], np.float32)},
                 [nh.from_array(np.array([0.3, 0.3, -0.3, 1e-30], np.float32), "m")])


def _float16_step(folder, name: str) -> str:
    """y = Cast(Cast(x, FLOAT16) · 1000 (an FP16 constant), FLOAT) at x = 70: the FLOAT16 Mul leaves
    float16's range (70000 > 65504) where float32 would not (sweep 9 B3's model)."""
    return save_ml(folder, name, [h.make_node("Cast", ["x"], ["h"], to=T.FLOAT16),
                                h.make_node("Mul", ["h", "k"], ["m"]),
                                h.make_node("Cast", ["m"], ["y"], to=T.FLOAT)],
                 [h.make_tensor_value_info("x", T.FLOAT, [3])],
                 [h.make_tensor_value_info("y", T.FLOAT, [3])],
                 {"x": np.array([70, 0.1, 1e-5], np.float32)},
                 [nh.from_array(np.array(1000, np.float16), "k")])


def _float8(path):
    """Cast to float8 e4m3fn (saturating): 500 and 1000 become 448 (bits 126)."""
    graph = h.make_graph([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E4M3FN)], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [5])], [h.make_tensor_value_info("y", T.FLOAT8E4M3FN, [5])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 21)], ir_version=10), path)


def run_132(folder: Path, cache_dir: Path) -> SharedRun:
    """The onnxruntime 1.32 cases of test_sweep_eight_refusals and test_sweep_eight_inputs_and_texts
    (which returns float8 outputs, as their bits), in one run."""
    refusals = _lowered(folder, "locale") + _lowered(folder, "locale_exp", {"y": np.array(["emu", "cat", "dog"])}) \
        + _dropout(folder, "dropout_off", False, 0.5) + _dropout(folder, "dropout_r0", True, 0.0) \
        + _dropout(folder, "dropout_on", True, 0.5) \
        + encoded(folder, "str_in", WORDS) + encoded(folder, "bytes_in", WORDS.astype(bytes)) \
        + _floor_mod(folder, "floor_mod") + _float16_step(folder, "f16_step")
    # opset 18: onnxruntime's FP16 Relu kernel (at opset 13 it runs in float32, and drops the input's cast)
    model(folder / "big_in.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])],
          opset=18)
    # y = x · 1e-8 · 1e8; z = x + [inf, 2e-8, 0, 0] (raised too, and inf - inf where it is compared)
    model(folder / "tiny_scale.onnx", [h.make_node("Mul", ["x", "a"], ["t"]), h.make_node("Mul", ["t", "b"], ["y"]),
                                       h.make_node("Add", ["x", "c"], ["z"])],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4]), ("z", T.FLOAT, [4])],
          [nh.from_array(np.float32(1e-8), "a"), nh.from_array(np.float32(1e8), "b"),
           nh.from_array(np.float32([np.inf, 2e-8, 0, 0]), "c")])
    model(folder / "sm.onnx", [h.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", T.FLOAT, [1, 4])],
          [("y", T.FLOAT, [1, 4])])
    # a mode onnxruntime refuses when its session starts: its ERROR log line, once on the terminal
    model(folder / "bad_mode.onnx", [h.make_node("Resize", ["x", "", "s"], ["y"], mode="bogus")],
          [("x", T.FLOAT, [1, 1, 2, 2])], [("y", T.FLOAT, [1, 1, 4, 4])], [nh.from_array(np.float32([1, 1, 2, 2]), "s")])
    _float8(folder / "f8out.onnx")
    # sweep 9 B8: y = If(ReduceSum(x) > 0, x · 1000 · 0.001, x): the arithmetic in a branch
    branch = h.make_graph([h.make_node("Mul", ["x", "k1"], ["t"]), h.make_node("Mul", ["t", "k2"], ["then_y"])],
                          "then", [], [h.make_tensor_value_info("then_y", T.FLOAT, [3])],
                          [nh.from_array(np.float32(1000), "k1"), nh.from_array(np.float32(0.001), "k2")])
    other = h.make_graph([h.make_node("Identity", ["x"], ["else_y"])], "else", [],
                         [h.make_tensor_value_info("else_y", T.FLOAT, [3])])
    model(folder / "in_branch.onnx", [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                                      h.make_node("Greater", ["s", "zero"], ["g"]),
                                      h.make_node("If", ["g"], ["y"], then_branch=branch, else_branch=other)],
          [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])], [nh.from_array(np.float32(0), "zero")], opset=18)
    # ... and between two Reshapes, which run in FP16 and compute nothing
    model(folder / "reshaped.onnx", [h.make_node("Reshape", ["x", "col"], ["c"]), h.make_node("Mul", ["c", "k1"], ["t"]),
                                     h.make_node("Mul", ["t", "k2"], ["u"]), h.make_node("Reshape", ["u", "row"], ["y"])],
          [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
          [nh.from_array(np.int64([3, 1]), "col"), nh.from_array(np.int64([3]), "row"),
           nh.from_array(np.float32(1000), "k1"), nh.from_array(np.float32(0.001), "k2")], opset=18)
    x8 = np.float32([0.3, 500, 1000, 1.1, -2.7])
    texts = ('[cases.odd_module]\nprofiles = ["fp32"]\n[cases.padded_attention]\nprofiles = ["fp32"]\n[cases.made_tensor]\nprofiles = ["fp32"]\n'
             + case(folder, "big_in", None, {"x": np.float32([70000, 1, -5, 65519])}, ("fp32", "fp16"))
             + case(folder, "tiny_scale", None, {"x": np.float32([1, 2, 3, 4])}, ("fp16",))
             + case(folder, "sm", None, {"x": np.float32([[0, -14, -16, 2]])}, ("fp32", "fp16"))
             + case(folder, "bad_mode", None, {"x": np.ones((1, 1, 2, 2), np.float32)})
             + case(folder, "in_branch", None, {"x": np.float32([7, 1, 2])}, ("fp16",))
             + case(folder, "reshaped", None, {"x": np.float32([7, 1, 2])}, ("fp16",))
             # the expected file's bits 127 (NaN) where the saturating Cast gives 126 (448)
             + case(folder, "f8out", None, {"x": x8}, expected={"y": np.uint8([42, 127, 127, 57, 195])}))
    return shared_run(folder, cache_dir, PROFILES + refusals + texts, "ort-1.32", {"odd.py": ODD})
