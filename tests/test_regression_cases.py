"""The real onnxruntime regressions of cases/ort_regressions.py, run for real through
matrices/ort-regressions.toml on the last good and the first bad release of each: the verdicts
must be the measured ones, and the known-issue entries must turn exactly the bad cells into xfail.
On the same run, what the release notes and the upgrade meeting read: the Markdown summary, B
against A, and speed across versions.

Only the environments at the lower boundaries run here (four uv virtualenvs, about 30 s on two
cores); `trtmatrix run -c matrices/ort-regressions.toml` runs the upper boundaries too.
"""

import json
import os
import re
import statistics
import subprocess
import sys
from html.parser import HTMLParser

import onnx
import pytest
from markdown_it import MarkdownIt
from packaging.specifiers import SpecifierSet

from conftest import REPO
from matrix.sources.known_issues import REGISTRY, load_registry
from matrix.store import list_runs, read_run

MATRIX = REPO / "matrices" / "ort-regressions.toml"

# Measured here (README.md, "Real onnxruntime regressions"): issue id -> case, the profiles that
# fail, the last good and first bad release below the range, the last bad and first good above it.
MEASURED = {
    "ort-clip-fp16-missing-bound":
        ("ort_clip_fp16_min_only", {"fp32", "fp32-noopt"}, "1.18.1", "1.19.0", "1.19.2", "1.20.0"),
    "ort-pad-averagepool-fusion-count-include-pad":
        ("ort_pad_avgpool_fusion", {"fp32"}, "1.18.1", "1.19.0", "1.20.1", "1.21.0"),
    "ort-pad-maxpool-fusion-zero-padding":
        ("ort_pad_maxpool_fusion", {"fp32"}, "1.16.3", "1.17.0", "1.31.1", "1.32.0"),
    "ort-averagepool-count-include-pad-end-padding":
        ("ort_avgpool_count_include_pad_end", {"fp32", "fp32-noopt"}, "1.20.1", "1.21.0", "1.24.4", "1.25.0"),
    # Found here (issue 42): a regression, and a fault with no good release before its fix (None).
    "ort-layernorm-fusion-fp16-epsilon":
        ("ort_layernorm_fp16_epsilon", {"fp32"}, "1.19.2", "1.20.0", "1.29.0", "1.30.0"),
    "ort-cast-chain-int-to-bool":
        ("ort_cast_int_to_bool_chain", {"fp32", "fp32-noopt"}, None, "1.16.3", "1.25.1", "1.26.0"),
}
LOWER_BOUNDARIES = ("ort-1.16.3", "ort-1.17.0", "ort-1.18.1", "ort-1.19.0")


def registry():
    issues = {issue.id: issue for issue in load_registry(REPO / "cases" / REGISTRY)}
    return {issue_id: issues[issue_id] for issue_id in MEASURED}


def test_the_registry_holds_the_measured_ranges_and_the_matrix_runs_every_boundary():
    matrix = MATRIX.read_text()
    for issue_id, issue in registry().items():
        case, profiles, last_good, first_bad, last_bad, first_good = MEASURED[issue_id]
        assert (issue.case, set(issue.profiles)) == (case, profiles)
        assert (issue.engine, issue.expected) == ("onnxruntime", "fail")
        versions = SpecifierSet(issue.versions)
        assert first_bad in versions and last_bad in versions, issue.versions
        assert (last_good is None or last_good not in versions) and first_good not in versions, issue.versions
        assert issue.source.startswith("https://github.com/microsoft/onnxruntime/")
        assert f"[cases.{case}]" in matrix
        for version in filter(None, (last_good, first_bad, last_bad, first_good)):
            names = [p.stem for p in (REPO / "images").glob("ort-*.toml")
                     if f'version = "{version}"' in p.read_text() and 'backend = "venv"' in p.read_text()]
            assert any(f'"{name}"' in matrix for name in names), f"no environment of {version} in {MATRIX.name}"


@pytest.fixture(scope="module")
def lower_boundary_run(tmp_path_factory, cache_dir):
    """matrices/ort-regressions.toml itself, with its folders pointed at the repository (cases,
    images) and at this test session (reports; its cache is the user's, which conftest makes the
    session's), on the four lower-boundary versions."""
    directory = tmp_path_factory.mktemp("regressions")
    text = MATRIX.read_text()
    for key, value in (("cases_dir", REPO / "cases"), ("images_dir", REPO / "images"),
                       ("reports_dir", directory / "reports")):
        text, count = re.subn(rf'^{key} = ".*"$', f'{key} = "{value}"', text, flags=re.M)
        assert count == 1, key
    config = directory / "ort-regressions.toml"
    config.write_text(text)
    envs = [arg for env in LOWER_BOUNDARIES for arg in ("--env", env)]
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), *envs], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = list_runs(directory / "reports")
    frame = read_run(run)
    frame.attrs.update(run_dir=run, config=config)  # for the views over the stored run (test_release_notes.py)
    return frame


def test_bad_versions_fail_as_known_issues_and_good_versions_pass(lower_boundary_run):
    frame = lower_boundary_run
    issues = registry()
    by_case = {MEASURED[i][0]: (i, issue) for i, issue in issues.items()}
    assert set(frame["case"]) == set(by_case)
    assert set(frame["env"]) == set(LOWER_BOUNDARIES)
    for row in frame.itertuples():
        issue_id, issue = by_case[row.case]
        profiles = MEASURED[issue_id][1]
        bad = row.profile in profiles and row.engine_version in SpecifierSet(issue.versions)
        where = f"{row.cell_id} (onnxruntime {row.engine_version}): {row.status}, max_abs {row.max_abs}"
        if bad:
            assert (row.verdict, row.status, row.known_issue) == ("fail", "xfail", issue_id), where
            assert row.max_abs > 0.5, where  # a wrong answer, not a rounding difference
        else:
            assert (row.verdict, row.status) == ("pass", "pass"), where
    # The boundary pairs that ran here: the last good passes, the first bad fails.
    cells = frame.set_index(["case", "profile", "engine_version"])
    ran = set(frame["engine_version"])
    for case, profiles, last_good, first_bad, *_ in MEASURED.values():
        for profile in profiles if {last_good, first_bad} <= ran else ():
            assert cells.loc[(case, profile, last_good), "verdict"] == "pass"
            assert cells.loc[(case, profile, first_bad), "verdict"] == "fail"


def test_the_fusion_bugs_need_the_optimizer_and_the_clip_bug_does_not(lower_boundary_run):
    """What tells a graph-optimizer fault from a kernel fault: the same cell with ORT_DISABLE_ALL."""
    cells = lower_boundary_run.set_index(["case", "profile", "engine_version"])["verdict"]
    assert cells[("ort_pad_maxpool_fusion", "fp32", "1.17.0")] == "fail"
    assert cells[("ort_pad_maxpool_fusion", "fp32-noopt", "1.17.0")] == "pass"
    assert cells[("ort_pad_avgpool_fusion", "fp32", "1.19.0")] == "fail"
    assert cells[("ort_pad_avgpool_fusion", "fp32-noopt", "1.19.0")] == "pass"
    assert cells[("ort_clip_fp16_min_only", "fp32", "1.19.0")] == "fail"
    assert cells[("ort_clip_fp16_min_only", "fp32-noopt", "1.19.0")] == "fail"


def test_each_case_is_a_handful_of_nodes_around_the_documented_op(lower_boundary_run, cache_dir):
    """The exported models: the faulty op is the one op besides casts, constants and the Pad."""
    expected = {"ort_clip_fp16_min_only": ["Cast", "Constant", "Clip", "Cast"],
                "ort_pad_maxpool_fusion": ["Constant", "Constant", "Pad", "MaxPool"],
                "ort_pad_avgpool_fusion": ["Constant", "Constant", "Pad", "AveragePool"]}
    for case, ops in expected.items():  # the run's own artifacts (another test may name an ONNX file so)
        (artifact,) = set(lower_boundary_run.loc[lower_boundary_run["case"] == case, "artifact"])
        model = cache_dir / "artifacts" / artifact / "model.onnx"
        assert [node.op_type for node in onnx.load(str(model)).graph.node] == ops, case


# --- For the release notes and the upgrade meeting ---------------------------------------------

AVGPOOL = "ort_pad_avgpool_fusion/fp32"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and "href" in attrs:
            self.hrefs.append(attrs["href"])
        if "id" in attrs:
            self.ids.add(attrs["id"])


def parsed(html: str) -> Links:
    links = Links()
    links.feed(html)
    return links


def test_the_summary_lists_the_avgpool_regression_with_its_known_issue_and_every_link_lands(lower_boundary_run, tmp_path):
    run_dir, config = lower_boundary_run.attrs["run_dir"], lower_boundary_run.attrs["config"]
    done = cli("summary", "-c", str(config), "--from", "ort-1.18.1", "--to", "ort-1.19.0")
    assert done.returncode == 0, done.stderr
    markdown = done.stdout
    failing = markdown.split("#### Newly failing")[1].split("####")[0]
    line = next(line for line in failing.splitlines() if f"`{AVGPOOL}`" in line)
    issue = registry()["ort-pad-averagepool-fusion-count-include-pad"]
    url, _, more = issue.source.partition(" ")
    assert "pass → xfail" in line and f"]({url}) " in line and "beyond tolerance" in line
    assert "fixed by https://github.com/microsoft/onnxruntime/pull/" in more and more in line  # visible, not a link title
    assert "`ort_pad_avgpool_fusion/fp32-noopt`" not in failing  # the optimizer's fault: noopt still passes
    # Rendered as Markdown (a table per environment, a list per group), every cell link lands on an
    # element of the report: the report's own permalinks.
    html = MarkdownIt("commonmark").enable("table").render(markdown)
    assert "<table>" in html and html.count("<tr>") == 1 + 4  # header + the four environments
    page = (run_dir / "report.html").read_text()  # its cells' ids are given by its script, from the page's data
    data = json.loads(page.split('<script type="application/json" id="data">')[1].split("</script>")[0])
    report_ids = parsed(page).ids | {f"cell-{data['rows'][line[0]]}/{data['envs'][line[1]]}" for line in data["cells"]}
    cell_links = [h for h in parsed(html).hrefs if "#cell-" in h]
    assert cell_links and all(h.startswith("report.html#cell-") for h in cell_links)
    assert all(h.split("#", 1)[1] in report_ids for h in cell_links)
    # A published report: links on its URL; written to a file.
    out = tmp_path / "notes.md"
    published = cli("summary", "-c", str(config), "--from", "ort-1.18.1", "--to", "ort-1.19.0",
                    "--link-base", "https://ci.example.org/runs/42/report.html", "-o", str(out))
    assert published.returncode == 0 and published.stdout == ""
    assert f"(https://ci.example.org/runs/42/report.html#cell-{AVGPOOL}/ort-1.19.0)" in out.read_text()
    # Without --link-base, written elsewhere: links relative to where the file is, not to the run folder.
    elsewhere = tmp_path / "notes" / "upgrade.md"
    elsewhere.parent.mkdir()
    assert cli("summary", "-c", str(config), "--from", "ort-1.18.1", "--to", "ort-1.19.0", "-o", str(elsewhere)).returncode == 0
    relative = re.search(rf"\]\(([^)#]*)#cell-{re.escape(AVGPOOL)}/ort-1.19.0\)", elsewhere.read_text()).group(1)
    assert (elsewhere.parent / relative).resolve() == (run_dir / "report.html").resolve()


def test_b_against_a_tells_a_changed_output_from_an_unchanged_one(lower_boundary_run):
    config = lower_boundary_run.attrs["config"]
    shown = cli("diff", "-c", str(config), "--from", "ort-1.18.1", "--to", "ort-1.19.0")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split(":")[0].strip(): line for line in shown.stdout.splitlines() if line.startswith("  ")}
    assert "beyond tolerance" in lines[AVGPOOL]  # 1.19.0's fused kernel: a different answer from 1.18.1's
    # The report's upgrade view, for its default pair (the two newest versions here), says the same.
    page = (lower_boundary_run.attrs["run_dir"] / "report.html").read_text()
    data = json.loads(page.split('<script type="application/json" id="data">')[1].split("</script>")[0])
    assert data["pair"] == ["ort-1.18.1", "ort-1.19.0"] and "beyond tolerance" in data["against"][AVGPOOL]
    # Unfused, both versions run the same kernels: B is A, bit for bit or within the tolerance.
    assert "identical" in lines["ort_pad_avgpool_fusion/fp32-noopt"] or "within tolerance" in lines["ort_pad_avgpool_fusion/fp32-noopt"]


def test_speed_across_versions_shows_every_version_and_judges_changes_by_a_test_over_the_repeats(lower_boundary_run):
    from matrix.worker.engines import REPEATS

    frame, config = lower_boundary_run, lower_boundary_run.attrs["config"]
    timed = frame.dropna(subset=["infer_ms"])
    runs = timed["infer_ms_runs"].map(json.loads)
    assert len(timed) == len(frame) and (runs.map(len) == REPEATS).all()
    assert ((runs.map(min) <= timed["infer_ms"]) & (timed["infer_ms"] <= runs.map(max))).all()  # the median of its runs
    shown = cli("diff", "-c", str(config), "--timing")
    assert shown.returncode == 0, shown.stderr
    header = next(line for line in shown.stdout.splitlines() if "ort-1.16.3" in line)
    assert all(env in header for env in ("ort-1.16.3", "ort-1.17.0", "ort-1.18.1", "ort-1.19.0"))
    assert "latency changes flagged: " in shown.stdout and "Mann-Whitney U" in shown.stdout and " ms" in shown.stdout
    report = (lower_boundary_run.attrs["run_dir"] / "report.html").read_text()
    assert 'id="speed"' in report and 'id="speed-ort_pad_avgpool_fusion"' in report


def test_a_speed_change_is_against_a_lower_version_run_the_same_way():
    """A container against a venv of the same version is not a change of version, nor a GPU
    against the CPU: each version is compared with the nearest lower one in its own kind of
    environment on its own device (a stranger read "ort-1.17-docker: -40% faster" against ort-1.17)."""
    import pandas as pd

    from matrix.report.timing import timing_view

    repeats = [1.0 + i / 100 for i in range(10)]
    envs = [("ort-1.17", "1.17.3", None, None, [2 * t for t in repeats]),
            ("ort-1.17-docker", "1.17.3", "img", None, repeats),
            ("ort-1.20", "1.20.1", None, None, [4 * t for t in repeats]),
            ("ort-1.20-docker", "1.20.1", "img", None, [1.5 * t for t in repeats]),
            ("ort-1.20-gpu", "1.20.1", None, "NVIDIA L4", [0.1 * t for t in repeats])]
    frame = pd.DataFrame([{"row_id": "case/fp32", "case": "case", "env": env, "engine": "onnxruntime",
                           "engine_version": version, "env_version": version, "status": "pass", "image": image,
                           "gpu": gpu, "build_s": 0.5, "infer_ms": statistics.median(runs), "infer_ms_runs": json.dumps(runs)}
                          for env, version, image, gpu, runs in envs])
    order, [row] = timing_view(frame)
    cells = dict(zip(order, row["cells"]))
    assert cells["ort-1.17"]["infer_change"] is None and cells["ort-1.17-docker"]["infer_change"] is None
    assert cells["ort-1.20"]["infer_change"] == pytest.approx(1.0) and cells["ort-1.20"]["flag"] == "slower"
    assert cells["ort-1.20-docker"]["infer_change"] == pytest.approx(0.5)  # against ort-1.17-docker
    assert cells["ort-1.20-gpu"]["infer_change"] is None  # no lower version on that GPU
