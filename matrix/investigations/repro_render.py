"""repro.py and ISSUE.md of a repro folder, from the templates beside this file: one script per
engine (only that engine's public API and numpy, with a shared judging part) and one issue per
upstream tracker, each the tracker's own bug-report template filled in:

- TensorRT and TensorRT-RTX: NVIDIA/TensorRT's .github/ISSUE_TEMPLATE/bug_report.md, as its
  issues show it (Description, Environment, Relevant Files, Steps To Reproduce with "Have you
  tried the latest release?" and "Can this model run on other frameworks?");
- onnxruntime: microsoft/onnxruntime's issue form for everything else than builds, mobile, web,
  performance and training (.github/ISSUE_TEMPLATE/08-general.yml, "General"): a `###` heading
  per field, as GitHub renders a submitted form;
- torch: pytorch/pytorch's .github/ISSUE_TEMPLATE/bug-report.yml (Describe the bug, Versions).
"""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).with_name("templates")
SCRIPTS = {"onnxruntime": "repro_onnxruntime.py.j2", "tensorrt": "repro_tensorrt.py.j2", "torch": "repro_torch.py.j2"}
ISSUES = {"onnxruntime": "issue_onnxruntime.md.j2", "tensorrt": "issue_tensorrt.md.j2", "torch": "issue_torch.md.j2"}
# Where each template's sections come from (named at the top of every ISSUE.md).
TRACKERS = {
    "onnxruntime": ("microsoft/onnxruntime", "https://github.com/microsoft/onnxruntime/issues/new/choose",
                    ".github/ISSUE_TEMPLATE/08-general.yml (General)"),
    "tensorrt": ("NVIDIA/TensorRT", "https://github.com/NVIDIA/TensorRT/issues/new/choose",
                 ".github/ISSUE_TEMPLATE/bug_report.md"),
    "torch": ("pytorch/pytorch", "https://github.com/pytorch/pytorch/issues/new/choose",
              ".github/ISSUE_TEMPLATE/bug-report.yml (Bug Report)"),
}


def md(text) -> str:
    """Text taken literally by Markdown, also inside a table cell."""
    special = "\\`*_[]<>|~#"
    return "".join("\\" + c if c in special else c for c in str(text)).replace("\n", " ")


def fence(text: str) -> str:
    """A code fence longer than any run of backticks in `text`."""
    run, longest = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


_environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined,
                                  keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
_environment.filters.update(py=repr, md=md, fence=fence)


def render_script(engine: str, context: dict) -> str:
    return _environment.get_template(SCRIPTS[engine]).render(**context)


def render_issue(engine: str, context: dict) -> str:
    repo, new_issue, template = TRACKERS[engine]
    return _environment.get_template(ISSUES[engine]).render(tracker=repo, new_issue=new_issue,
                                                             tracker_template=template, **context)
