"""Cells as JUnit test cases, for CI systems that show test reports: one suite per environment,
one test case per row (case · params · profile)."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

from ..store.outputs import write_output
from .error_text import bits_text, drift_text, rule_text, worst_error

FAILED = {"fail", "timeout"}
ERRORED = {"error", "crash", "disputed", "no_reference"}
# Not a failure, and not a pass either: a CI system shows these as skipped, with the reason.
SKIPPED = {"skipped", "xfail", "built", "unsupported"}
NOT_RUN = {"built": "built, not run", "unsupported": "unsupported"}
# What XML 1.0 cannot hold, even escaped (an ESC from a model's op type, a NUL in a log): written
# out as \x1b instead, so that every XML parser reads the file.
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _text(row: pd.Series, column: str) -> str:
    """The column's text, or "" where the cell has none: a column no cell of a group filled is NaN
    (or None, or pd.NA) in a frame, and NaN is true, so `row.get(column) or ""` lets it through."""
    value = row.get(column)
    return value if isinstance(value, str) else ""


def _tolerance(row: pd.Series, column: str) -> str:
    value = pd.to_numeric(row.get(column), errors="coerce")
    return "none" if pd.isna(value) else f"{value:g}"


def _message(row: pd.Series) -> str:
    parts = [f"{row['status']}"]
    worst = worst_error(row, 3)
    if worst:
        finite = pd.notna(row.get("max_abs")) and math.isfinite(row["max_abs"])
        # NaN or Inf where the reference is finite: said as the terminal says it, not as "max_abs inf"
        shown = worst if bits_text(row) else f"max_abs {worst}" if finite else worst if isinstance(row.get("wrong_shape"), str) else \
            f"{worst} in the outputs"
        parts.append(f"{shown} (atol {_tolerance(row, 'atol')}, rtol {_tolerance(row, 'rtol')})")
    if drift_text(row):
        parts.append(drift_text(row))
    if _text(row, "error"):
        parts.append(row["error"])
    if isinstance(row.get("rule"), str):  # judged by a rule: what it measured, where the worst was
        parts.append(rule_text(row))
    return "; ".join(parts)


def write_junit(frame: pd.DataFrame, path: Path, run_id: str) -> None:
    suites = ET.Element("testsuites", name=f"trtmatrix {run_id}")
    for env, group in frame.groupby("env", sort=False):
        suite = ET.SubElement(suites, "testsuite", name=env, tests=str(len(group)),
                              failures=str(int(group["status"].isin(FAILED).sum())),
                              errors=str(int(group["status"].isin(ERRORED).sum())),
                              skipped=str(int(group["status"].isin(SKIPPED).sum())))
        for _, row in group.iterrows():
            seconds = pd.to_numeric(row.get("build_s"), errors="coerce")
            case = ET.SubElement(suite, "testcase", classname=f"trtmatrix.{env}", name=str(row["row_id"]),
                                 time=f"{0.0 if pd.isna(seconds) else seconds:.3f}")
            status = row["status"]
            if status in FAILED:
                ET.SubElement(case, "failure", message=_message(row), type=status).text = _text(row, "log_tail")
            elif status in ERRORED:
                ET.SubElement(case, "error", message=_message(row), type=status).text = _text(row, "log_tail")
            elif status == "skipped":
                ET.SubElement(case, "skipped", message=_text(row, "error") or "skipped")
            elif status in NOT_RUN:
                ET.SubElement(case, "skipped", message=f"{NOT_RUN[status]}: {_text(row, 'error')}")
            elif status == "xfail":
                ET.SubElement(case, "skipped", message=f"known issue {_text(row, 'known_issue')}: {_message(row)}")
    for element in suites.iter():
        element.text = _xml_text(element.text) if element.text else element.text
        for name, value in element.attrib.items():
            element.set(name, _xml_text(value))
    write_output(path, lambda target: ET.ElementTree(suites).write(target, encoding="utf-8", xml_declaration=True))
