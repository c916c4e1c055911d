"""Cells as JUnit test cases, for CI systems that show test reports: one suite per environment,
one test case per row (case · params · profile)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

FAILED = {"fail", "timeout"}
ERRORED = {"error", "crash"}


def _message(row: pd.Series) -> str:
    parts = [f"{row['status']}"]
    if pd.notna(row.get("max_abs")):
        parts.append(f"max_abs {row['max_abs']:.3e} (atol {row['atol']:g}, rtol {row['rtol']:g})")
    if row.get("error"):
        parts.append(str(row["error"]))
    return "; ".join(parts)


def write_junit(frame: pd.DataFrame, path: Path, run_id: str) -> None:
    suites = ET.Element("testsuites", name=f"trtmatrix {run_id}")
    for env, group in frame.groupby("env", sort=False):
        suite = ET.SubElement(suites, "testsuite", name=env, tests=str(len(group)),
                              failures=str(int(group["status"].isin(FAILED).sum())),
                              errors=str(int(group["status"].isin(ERRORED).sum())),
                              skipped=str(int(group["status"].isin({"skipped", "xfail"}).sum())))
        for _, row in group.iterrows():
            seconds = row["build_s"] if pd.notna(row["build_s"]) else 0.0
            case = ET.SubElement(suite, "testcase", classname=f"trtmatrix.{env}", name=row["row_id"],
                                 time=f"{seconds:.3f}")
            status = row["status"]
            if status in FAILED:
                ET.SubElement(case, "failure", message=_message(row), type=status).text = row.get("log_tail") or ""
            elif status in ERRORED:
                ET.SubElement(case, "error", message=_message(row), type=status).text = row.get("log_tail") or ""
            elif status == "skipped":
                ET.SubElement(case, "skipped", message=str(row.get("error") or "skipped"))
            elif status == "xfail":
                ET.SubElement(case, "skipped", message=f"known issue {row['known_issue']}: {_message(row)}")
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
