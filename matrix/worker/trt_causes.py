"""What TensorRT refuses, in a few words, from its own messages (stdlib only: tested on the host).

Thousands of refusals read as a handful of causes, so a cause must name what is refused and read
the same whatever words a release uses for it:
- the ONNX parser refusing an input's data type names no type ("operator:  (importInput):
  UNSUPPORTED_NODE: ... Failed to convert ONNX date type"): the type is taken from the inputs;
- an operator with no importer reads "Op type X is not supported in TensorRT-RTX" (INTERNAL_ERROR)
  in 1.4 and "Plugin not found" / "failed to load X plugin" (INVALID_NODE) in 1.7, "No importer
  registered for op" elsewhere: one cause, "X (operator not supported)";
- a node the parser calls invalid ("Invalid Node - node_of_sum") says why in the builder's error
  before it ("... But type is UInt8"): that error is kept in the words, its type in the cause;
- the builder refusing a type ("cannot be quantized", an FP8 tensor outside Q/DQ) or an operator
  ("not supported by a dedicated kernel") is a refusal (`unsupported`), not something that broke.
"""

import re

# TensorRT's data types by numpy's names (ml_dtypes' for the narrow ones): an input of any other
# type is one the parser cannot convert.
TRT_TYPES = {"float32", "float16", "bfloat16", "int8", "int32", "int64", "bool", "uint8", "float8_e4m3fn",
             "int4", "float4_e2m1fn", "float8_e8m0fnu"}
# CUDA's lines on a host without a driver: beside the point of a refusal.
NOISE = ("catchCudaError", "Invalid Engine. Please ensure")
NOT_SUPPORTED = re.compile(r"Op type \w+ is not supported|Plugin not found|failed to load \w+ plugin"
                           r"|No importer registered for op")
# (the builder's words, the cause): a type or an operator it refuses.
BUILDER_REFUSALS = [
    (r"cannot be quantized by", lambda m: "builder: an INT8 tensor without a DQ node (cannot be quantized)"),
    (r"Tensor (input|output) has datatype (\w+) but is not (?:produced|consumed) by",
     lambda m: "builder: {} network {} outside Q/DQ".format(m.group(2), m.group(1))),
    (r"Set network output type (\w+) must be same as inferred output type (\w+)",
     lambda m: "builder: output type {} where it infers {}".format(*m.groups())),
    (r"`zero_point` which is not an initializer", lambda m: "builder: a Q/DQ zero point that is not a constant"),
    (r"(\w+) operation was not supported by a dedicated kernel",
     lambda m: "{} (builder: no dedicated kernel for these shapes and types)".format(m.group(1))),
]


def errors_text(lines):
    """The errors, in TensorRT's words; of a parser failure, the parser's own one line per node
    ("In node 0 ... operator: Det (checkDet): UNSUPPORTED_NODE ...") without its framing lines, and
    where it calls a node invalid, the error that says why."""
    errors = [line[4:] for line in lines if line[:3] in ("[E]", "[!]")]
    nodes = [e for e in errors if e.startswith("In node")]
    reasons = [e for e in errors if "Error Code" in e and not any(n in e for n in NOISE)] \
        if any("Invalid Node" in n for n in nodes) else []
    return "; ".join(reasons + nodes or errors) or "no message from TensorRT"


def refusal_cause(errors, input_types=()):
    """What the parser refuses, from its first error ("... and operator: Det (checkDet):
    UNSUPPORTED_NODE: ..." → "Det (UNSUPPORTED_NODE)"): what a long list is grouped by.
    `input_types`: the numpy type names of the model's inputs."""
    found = re.search(r"operator: (\w*) \((\w+)\): (\w+): ?(.*)", errors)
    if not found:
        return "the ONNX parser refuses the model"
    operator, function, code, words = found.groups()
    if not operator and function == "importInput" and "convertDtype" in words:
        lacking = sorted(set(input_types) - TRT_TYPES)
        return "an input of type {} ({})".format("/".join(lacking) or "unknown", code)
    operator = operator or re.sub(r"^import", "", function)  # "(importScatterElements)"
    if NOT_SUPPORTED.search(words):
        return "{} (operator not supported)".format(operator)
    typed = re.search(r"But type is (\w+)", errors)
    return "{} ({})".format(operator, "type {}".format(typed.group(1)) if typed else code)


def builder_refusal(errors):
    """The cause where the builder refuses a type or an operator of the model, else None."""
    for pattern, cause in BUILDER_REFUSALS:
        found = re.search(pattern, errors)
        if found:
            return cause(found)
    return None
