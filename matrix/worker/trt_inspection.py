"""What the built engine really did with the requested FP32 layers (stdlib only).

Reads the engine inspector's per-layer JSON (ProfilingVerbosity.DETAILED). A requested layer is
found as an engine layer of the same name, as part of a fused name ("A + B"), in a Myelin region
("{ForeignNode[A...B]}", whose name lists only its first and last layer), or in the "Metadata"
field where TensorRT 10 lists the ONNX layers an engine layer came from.

TensorRT 10's ONNX parser writes that metadata on every network layer it makes for a node, as
`[ONNX Layer: <node name> | <property> | ...]` (several, separated by \x1e or \x1f, once fused):
onnx_origins reads it, for the engine layers here and for the network layers in layer_select.
"""

import re

FUSED_SPLIT = re.compile(r" \+ |\.\.\.|^\{ForeignNode\[|\]\}$")
ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^|\]]+)")
DTYPES = (("BFLOAT16", "bf16"), ("FP32", "fp32"), ("FLOAT", "fp32"), ("FP16", "fp16"), ("HALF", "fp16"),
          ("FP8", "fp8"), ("INT8", "int8"), ("INT32", "int32"), ("INT64", "int64"), ("BOOL", "bool"))


def onnx_origins(metadata):
    """The ONNX node names a layer's metadata names (none before TensorRT 10)."""
    return [name.strip() for name in ONNX_LAYER.findall(metadata or "")]


def output_dtype(layer):
    """The datatype of the layer's first output: 'Format/Datatype' up to TensorRT 10, 'Datatype' after."""
    outputs = layer.get("Outputs") or []
    if not outputs or not isinstance(outputs[0], dict):
        return None
    text = (outputs[0].get("Format/Datatype") or outputs[0].get("Datatype") or "").upper()
    for key, dtype in DTYPES:
        if key in text:
            return dtype
    return None


def is_fused_region(layer):
    return layer.get("LayerType") == "Myelin" or str(layer.get("Name", "")).startswith("{ForeignNode[")


def _members(layer):
    name = str(layer.get("Name", ""))
    members = {part for part in FUSED_SPLIT.split(name) if part}
    members.update(onnx_origins(str(layer.get("Metadata", ""))))
    return members


def _home(engine_layers, name):
    return next((l for l in engine_layers if l.get("Name") == name), None) or \
        next((l for l in engine_layers if name in _members(l)), None)


def check_fp32_layers(engine_layers, requested, origins=None):
    """Per requested layer: where it went and in what precision. `origins`: {layer: the ONNX nodes
    it came from}, for a layer the engine lists only by its node. Returns (summary, details)."""
    details = []
    for name in requested:
        names = [name, *(origins or {}).get(name, ())]
        home = next(filter(None, (_home(engine_layers, n) for n in names)), None)
        if home is None:
            details.append({"layer": name, "engine_layer": None, "fused": None, "precision": None,
                            "verdict": "absent"})  # folded away (constant, no-op) or renamed
            continue
        fused = is_fused_region(home)
        precision = None if fused else output_dtype(home)
        verdict = "fused" if fused else ("fp32" if precision == "fp32" else "not fp32" if precision else "unknown")
        details.append({"layer": name, "engine_layer": home.get("Name"), "fused": fused,
                        "precision": precision, "verdict": verdict})
    return summarize(details), details


def summarize(details):
    if not details:
        return None
    count = len(details)
    wrong = [d["layer"] for d in details if d["verdict"] == "not fp32"]
    fused = [d["layer"] for d in details if d["verdict"] == "fused"]
    if wrong:
        return "NOT HONOURED: {}/{} requested FP32 layers ran in lower precision ({})".format(
            len(wrong), count, ", ".join(wrong[:5]) + (" ..." if len(wrong) > 5 else ""))
    if fused:
        return "UNVERIFIED: {}/{} requested FP32 layers sit in fused Myelin regions, which override per-layer " \
               "precision and do not report it ({})".format(len(fused), count, ", ".join(fused[:5]))
    ok = sum(1 for d in details if d["verdict"] == "fp32")
    return "ok: {}/{} requested FP32 layers ran in FP32".format(ok, count)


def check_network_types(network_layers, requested):
    """In a strongly typed network the types are the model's: whether the layers keep_fp32 selected
    (layer_select) have FP32 floating-point outputs there, before any engine exists. A summary in
    summarize's words, for builds that cannot be inspected because they cannot run here."""
    types = {layer["name"]: [d for d in layer["dtypes"] if d in ("FLOAT", "HALF", "BF16")] for layer in network_layers}
    wrong = [name for name in requested if any(d != "FLOAT" for d in types.get(name, []))]
    if wrong:
        return "NOT HONOURED: {}/{} requested FP32 layers are not FP32 in the strongly typed network ({})".format(
            len(wrong), len(requested), ", ".join(wrong[:5]) + (" ..." if len(wrong) > 5 else ""))
    return "ok: {0}/{0} requested FP32 layers are FP32 in the strongly typed network (the engine was not " \
           "inspected)".format(len(requested))
