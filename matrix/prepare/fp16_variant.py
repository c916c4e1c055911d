"""The FP16 copy of a model that onnxruntime's FP16 profiles run: converted, repaired, checked.

`onnxruntime.transformers.float16.convert_float_to_float16` leaves two defects (seen on the seed
case mha_transformer_block): the Cast nodes it inserts are appended after their consumers, so the
graph is not topologically sorted and the ONNX checker rejects it; and a float→float Cast of the
original becomes a float16→float16 Cast, which onnxruntime 1.17–1.20 mistypes when graph
optimisations are off ("InsertedPrecisionFreeCast_… does not match expected type"). The casts go
with onnxruntime's own graph helper; the order is made here, counting what If/Loop/Scan bodies read
from the outer scope (onnxruntime's `topological_sort` does not: a Cast an If's branch reads stayed
after the If). A variant is kept only once the full ONNX checker (strict shape and type inference
included) accepts it and this host's onnxruntime loads it: no cell ever runs an invalid model.

Variants are cached in the artifact folder, keyed by prepare's own code (matrix/prepare/*.py is
hashed into every artifact key) and the host's converter versions: a change here re-runs their cells.
"""

from __future__ import annotations

import heapq
from pathlib import Path

import onnx

from ..graph_walk import every_node, node_inputs
from ..reference.float64_graph import DEFAULT_FLOAT_OUTPUT, as_tensor_constant, densified, inlined


class InvalidVariant(ValueError):
    """The FP16 variant is not a valid ONNX model."""


def _fp16_model(model: onnx.ModelProto, keep_fp32: list[str]) -> onnx.ModelProto:
    """The FP16 copy with FP32 inputs and outputs; `keep_fp32` (exact node names) stay FP32."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    if not model.graph.node:  # outputs that are inputs: nothing to convert (the converter's casts made a cycle)
        return model
    for node in model.graph.node:  # value_float(s) Constants, the same values as tensors: the converter
        as_tensor_constant(node)  # relabels the former without converting them
    order = [output.name for output in model.graph.output]
    passed = _outputs_made_by_nodes(model.graph)
    # the window ops and MelWeightMatrix name their output type in an attribute the converter leaves
    # FLOAT (sweep 15 H13's audio front end failed the checker): kept FP32 between casts
    fp16 = OnnxModel(convert_float_to_float16(model, keep_io_types=True,
                                              op_block_list=[*DEFAULT_OP_BLOCK_LIST, *_float32_only(model),
                                                             *DEFAULT_FLOAT_OUTPUT],
                                              node_block_list=keep_fp32))
    fp16.enable_shape_infer = False  # the converter's ONNX shape inference has already typed every value
    fp16.remove_useless_cast_nodes()
    ordered = topological_order(fp16.model.graph)
    del fp16.model.graph.node[:]
    fp16.model.graph.node.extend(ordered)
    outputs = {output.name: output for output in [*fp16.model.graph.output, *passed]}
    del fp16.model.graph.output[:]
    fp16.model.graph.output.extend(outputs[name] for name in dict.fromkeys(order))
    return fp16.model


def _float32_only(model: onnx.ModelProto) -> list[str]:
    """The model's ops whose schema, at its opset, types some input or output float32 and none FP16
    (QuantizeLinear's and DequantizeLinear's scales below opset 19, Celu): converted, they fail the
    checker; kept FP32 between casts, the copy is valid and the rest of it is FP16."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    kept = []
    for op_type in sorted({node.op_type for node in every_node(model.graph) if node.domain in ("", "ai.onnx")}):
        try:
            schema = onnx.defs.get_schema(op_type, opset, "")
        except onnx.defs.SchemaError:  # an op the installed onnx does not know: the checker will say so
            continue
        constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        allowed = [constraints.get(p.type_str, {p.type_str}) for p in [*schema.inputs, *schema.outputs]]
        if any("tensor(float)" in types for types in allowed) and \
                not any("tensor(float16)" in types for types in allowed):
            kept.append(op_type)
    return kept


def _outputs_made_by_nodes(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Outputs as the converter can cast them: each listed once (a second listing of one name made
    two casts for one renamed producer), and an initializer output computed by an Identity of it (no
    node to rename: its cast read a value nothing made). A graph input passed through as an output
    (a mask handed back) is taken out and returned, to be listed again after the conversion: the
    converter renamed the input itself, which its readers then lacked, and the copy's inputs stay
    FP32 (an Identity cannot make it: its output would need the input's own name)."""
    listed = {output.name: output for output in graph.output}
    inputs = {value.name for value in graph.input}
    passed = [output for name, output in listed.items() if name in inputs]
    del graph.output[:]
    graph.output.extend(output for name, output in listed.items() if name not in inputs)
    constants = {initializer.name: initializer for initializer in graph.initializer}
    taken = {name for node in graph.node for name in [*node.input, *node.output]} | set(constants) | inputs
    for name in (name for name in listed if name in constants):
        kept = next(f"{name}_value{n or ''}" for n in range(len(taken) + 1) if f"{name}_value{n or ''}" not in taken)
        taken.add(kept)
        constants[name].name = kept
        graph.node.insert(0, onnx.helper.make_node("Identity", [kept], [name], name=f"{name}_as_output"))
    return passed


def topological_order(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes so that each comes after every node whose output it reads, its subgraphs' reads
    included; otherwise in their order. Raises InvalidVariant naming a node that can never run."""
    produced_by = {name: index for index, node in enumerate(graph.node) for name in node.output if name}
    waits = [{produced_by[name] for name in node_inputs(node) if name in produced_by} - {index}
             for index, node in enumerate(graph.node)]
    readers: dict[int, list[int]] = {}
    for index, sources in enumerate(waits):
        for source in sources:
            readers.setdefault(source, []).append(index)
    ready = [index for index, sources in enumerate(waits) if not sources]
    heapq.heapify(ready)
    ordered: list[onnx.NodeProto] = []
    while ready:
        index = heapq.heappop(ready)
        ordered.append(graph.node[index])
        for reader in readers.get(index, ()):
            waits[reader].discard(index)
            if not waits[reader]:
                heapq.heappush(ready, reader)
    if len(ordered) < len(graph.node):
        stuck = next(node for index, node in enumerate(graph.node) if waits[index])
        raise InvalidVariant(f"the FP16 variant's node {stuck.name or stuck.op_type} waits on a cycle")
    return ordered


# onnxruntime's words for an op it has no FP16 kernel for (EyeLike on the CPU): no fault of the copy.
NO_KERNEL = ("Could not find an implementation for", "Failed to find kernel for")


def write_fp16_variant(model: onnx.ModelProto, keep_fp32: list[str], path: Path, original: Path) -> None:
    """Write the FP16 copy of `model` (saved at `original`) to `path`; raise InvalidVariant (and
    leave no file) if the conversion fails, the checker rejects it or onnxruntime cannot load it
    where it loads the model itself."""
    import onnxruntime

    try:
        onnx.save(_fp16_model(densified(inlined(model)), keep_fp32), str(path))  # sparse weights: dense (sweep 14 G9)
    except InvalidVariant:
        raise
    except Exception as exc:  # noqa: BLE001 - the converter's own failure, in its words
        raise InvalidVariant(f"the FP16 conversion failed: {type(exc).__name__}: {_first_line(exc)}") from None
    try:
        onnx.checker.check_model(str(path), full_check=True)
        options = onnxruntime.SessionOptions()
        # fatal only: its warnings about constant folding are no finding of the copy's, and a refusal
        # raises with the words its ERROR log line would print on the terminal (issue 41, sweep 8 A9)
        options.log_severity_level = 4
        # The copy's validity, not onnxruntime's optimiser: a fusion that cannot take the FP16 graph
        # (LayerNormFusion's mixed types) is that engine's to say, on its own cells.
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        path.unlink()
        try:  # the model's own fault (an output declared of another shape than it computes), not the copy's
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as own:
            raise InvalidVariant(f"the model itself fails the ONNX checker's full check, which its FP16 copy must "
                                 f"pass: {_first_line(own)}") from None
        raise InvalidVariant(f"the FP16 variant fails the ONNX checker: {_first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - onnxruntime's refusal names the node
        if any(words in str(exc) for words in NO_KERNEL) or _refused_alike(exc, original, options):
            return  # a valid copy: each engine says what it lacks or refuses, in its own cells
        path.unlink()
        raise InvalidVariant(f"onnxruntime {onnxruntime.__version__} cannot load the FP16 variant: {_first_line(exc)}") from None


def _refused_alike(exc: Exception, original: Path, options) -> bool:
    """Whether onnxruntime refuses the model itself as it refuses the copy (an attribute it does not
    support: LSTM's `layout = 1`): no fault of the copy's, and its cells are `unsupported` as the
    FP32 ones are, not an `error` (engines such as TensorRT may take it)."""
    import onnxruntime

    from ..worker.engines.onnxruntime_engine import refusal

    try:
        onnxruntime.InferenceSession(str(original), options, providers=["CPUExecutionProvider"])
    except Exception as own:  # noqa: BLE001 - compared with the copy's refusal
        cause = refusal(str(own).strip(), {})
        return cause is not None and cause == refusal(str(exc).strip(), {})
    return False


def _first_line(exc: BaseException) -> str:
    """The message on one line: the checker's names the node on its second."""
    return " ".join(str(exc).split())[:400]
