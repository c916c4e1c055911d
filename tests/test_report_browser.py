"""The real report.html of a real run, opened in headless Chromium (Debian's chromium, driven by
Playwright): what a person sees, clicks and links to. A screenshot is saved in the run folder."""

import os
import re
import subprocess
import shutil

import numpy as np
import onnx
import pytest

from conftest import PROFILES, matrix_file, tiny_case
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.store import REPORT, read_run

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                  "--disable-background-networking", "--disable-component-update"]
XSS = "injected failure <script>alert('x')</script> & more"


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("TRTMATRIX_REQUIRE_BROWSER") == "1":
            pytest.fail("TRTMATRIX_REQUIRE_BROWSER=1 but Debian's chromium is not installed")
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def report_run(tmp_path_factory, cache_dir):
    """On onnxruntime 1.17 and 1.32, and a TensorRT column skipped here, three rows whose
    failures the test makes itself (no engine bug is relied on):
    - tiny/raise: the engine raises an error full of HTML;
    - wrong/fp32: judged against expected outputs of 2.0, which tanh never reaches: fails everywhere;
    - ir10/fp32: the same model stamped ONNX IR version 10, which onnxruntime reads from 1.18 on
      (its documented compatibility table: 1.17 reads IR <= 9): unsupported on 1.17, a pass on 1.32.
      That is the upgrade view's version-specific change."""
    from conftest import make_tiny_model

    home = tmp_path_factory.mktemp("report")
    model, inputs = make_tiny_model(home)
    wrong = home / "wrong_expected.npz"
    np.savez(wrong, y=np.full((4, 8), 2.0))
    ir10 = onnx.load(model)
    ir10.ir_version = 10
    onnx.save(ir10, home / "ir10.onnx")
    body = (PROFILES + '[profiles.raise]\ninject = "raise"\n' + tiny_case(model, inputs, ("raise",))
            + f'[cases.wrong]\nonnx = "{model}"\ninputs = "{inputs}"\nexpected = "{wrong}"\nprofiles = ["fp32"]\n'
            + f'[cases.ir10]\nonnx = "{home / "ir10.onnx"}"\ninputs = "{inputs}"\nprofiles = ["fp32"]\n')
    config = matrix_file(home, cache_dir, body, environments=("ort-1.17", "ort-1.32", "trt-10.8"))
    run_dir = MatrixRun(build_plan(config)).execute()
    frame = read_run(run_dir)
    cells = frame.set_index("cell_id")
    # The failures are the ones made here, not something else going wrong.
    refused = cells.loc["ir10/fp32/ort-1.17"]
    assert refused["status"] == "unsupported" and refused["error"].startswith("IR version 10 (reads up to 9) — onnxruntime 1.17.3: ")
    assert "Unsupported model IR version: 10" in refused["error"]  # its own words kept
    assert cells.loc["ir10/fp32/ort-1.32", "status"] == "pass"
    assert (cells.loc[["wrong/fp32/ort-1.17", "wrong/fp32/ort-1.32"], "status"] == "fail").all()
    return run_dir, frame


@pytest.fixture
def page(browser, report_run):
    run_dir, _ = report_run
    page = browser.new_page(viewport={"width": 1300, "height": 800})
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto((run_dir / REPORT).as_uri())
    yield page
    assert page.errors == [], page.errors  # no script error on the page, ever
    page.close()


def visible_rows(page):
    return page.locator("#matrix tbody tr:visible")


def test_the_matrix_renders_every_row_and_cell(page, report_run):
    run_dir, frame = report_run
    assert visible_rows(page).count() == frame["row_id"].nunique() == 3
    # Engine groups, TensorRT's first (issue 44, point 4), each named once above its columns.
    assert page.locator("#matrix thead th.group").all_inner_texts() == ["TensorRT", "onnxruntime"]
    headers = page.locator("#matrix thead th[data-gpu]").all_inner_texts()
    assert [h.split("\n")[0] for h in headers] == ["trt-10.8", "ort-1.17", "ort-1.32"]  # by version in a group
    # A version no cell ran is the definition's, and says so; a version that ran is the one reported.
    assert [h.split("\n")[1] for h in headers] == ["10.8.0.43 (declared)", "1.17.3", "1.32.0"]
    failing = page.locator("[id='cell-wrong/fp32/ort-1.17']")
    assert "fail" in failing.get_attribute("class")
    assert failing.inner_text() == f"{frame.set_index('cell_id').loc['wrong/fp32/ort-1.17', 'max_abs']:.1e}"
    assert page.locator("td.c.skipped").count() == 3
    # Why a column did not run is said above the matrix, not only in each cell's details.
    reason = frame.set_index("cell_id").loc["tiny/raise/trt-10.8", "error"]
    assert page.locator("#not-run").inner_text() == f"Not run here: skipped trt-10.8 ({reason})"
    page.screenshot(path=str(run_dir / "screenshot.png"), full_page=True)
    assert (run_dir / "screenshot.png").stat().st_size > 10_000


def test_the_matrix_shows_with_and_without_javascript(browser, report_run):
    """issue 44, remaining point 3 (a 50,000-cell page laid its table out four or five times while its
    rows were parsed: the matrix is hidden until the page's script starts): once the page has loaded
    the matrix is in view, every row of it, and a reader without JavaScript sees it too."""
    run_dir, frame = report_run
    for javascript in (True, False):
        context = browser.new_context(java_script_enabled=javascript, viewport={"width": 1300, "height": 800})
        page = context.new_page()
        page.goto((run_dir / REPORT).as_uri())
        assert page.locator("#matrix-box").is_visible(), f"JavaScript {'on' if javascript else 'off'}"
        assert visible_rows(page).count() == frame["row_id"].nunique() == 3
        assert page.evaluate("document.documentElement.className") == ""
        context.close()


def test_a_status_filter_hides_rows_and_a_case_filter_keeps_one_case(page):
    for status in ("pass", "error", "unsupported", "skipped"):
        page.uncheck(f"input[name=status][value={status}]")
    # "Show rows with: fail" — only the row with a failing cell is left.
    assert [r.get_attribute("data-row") for r in visible_rows(page).all()] == ["wrong/fp32"]
    for status in ("pass", "error", "unsupported", "skipped"):
        page.check(f"input[name=status][value={status}]")
    page.select_option("#case-filter", "tiny")
    assert [r.get_attribute("data-row") for r in visible_rows(page).all()] == ["tiny/raise"]
    assert page.locator("#row-count").inner_text() == "1 of 3 rows"


def shown(cell) -> bool:
    """What a person sees: the element at the middle of the cell is the cell (or inside it), so
    the cell is on screen and nothing covers it. No sub-pixel layout assumed."""
    return cell.evaluate("""cell => {
        const box = cell.getBoundingClientRect();
        const seen = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
        return seen !== null && cell.contains(seen);
    }""")


def test_a_permalink_scrolls_to_its_cell_and_opens_its_details(browser, report_run):
    run_dir, _ = report_run
    # Low, so the last row starts off screen; wide, so the details panel (fixed, at the right)
    # leaves the matrix visible.
    page = browser.new_page(viewport={"width": 1300, "height": 250})
    cell_id = "ir10/fp32/ort-1.32"
    cell = page.locator(f"[id='cell-{cell_id}']")
    page.goto((run_dir / REPORT).as_uri())
    assert not shown(cell)
    page.goto("about:blank")
    page.goto((run_dir / REPORT).as_uri() + "#cell-" + cell_id)
    assert shown(cell)
    details = page.locator("#details")
    details.locator("h3").first.wait_for()  # the details come from report-details/ when the cell opens
    assert details.is_visible()
    assert details.locator("h2").inner_text() == cell_id
    assert "trtmatrix run -c" in details.inner_text() and f"--cell {cell_id}" in details.inner_text()
    page.close()


def test_the_upgrade_view_lists_the_right_cells(page):
    page.select_option("#env-a", "ort-1.17")
    page.select_option("#env-b", "ort-1.32")
    assert page.locator("#upgrade-newly-supported + table a").all_inner_texts() == ["ir10/fp32"]
    # Only the groups that hold rows: no empty "(0)" headings (issue 44, point 4).
    assert page.locator("#upgrade-newly-failing").count() == 0
    assert not any(h.endswith("(0)") for h in page.locator("#upgrade-lists h3").all_inner_texts())
    page.select_option("#env-a", "ort-1.32")
    page.select_option("#env-b", "ort-1.17")
    assert page.locator("#upgrade-newly-unsupported + table a").all_inner_texts() == ["ir10/fp32"]
    assert page.locator("#upgrade-newly-failing").count() == 0


def test_html_in_an_engine_error_is_shown_as_text_and_never_runs(page, report_run):
    run_dir, _ = report_run
    page.locator("[id='cell-tiny/raise/ort-1.17']").click()
    details = page.locator("#details")
    details.locator("h3").first.wait_for()
    assert XSS in details.inner_text()
    assert page.dialogs == []
    assert page.locator("#details script").count() == 0
    source = (run_dir / REPORT).read_text()
    assert "<script>alert" not in source  # escaped in the embedded data, not only in the DOM


def test_diff_in_the_terminal_agrees_with_the_upgrade_view(report_run):
    from test_reports_cli import cli

    run_dir, _ = report_run
    shown = cli("diff", str(run_dir), "--from", "ort-1.17", "--to", "ort-1.32")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split("│")[2].strip(): line.split("│")[1].strip() for line in shown.stdout.splitlines()
             if line.count("│") > 3}
    assert lines == {"ir10/fp32": "newly supported", "wrong/fp32": "unchanged", "tiny/raise": "unchanged"}


def test_the_history_page_builds_a_row_per_cell_linking_into_each_run(browser, report_run):
    run_dir, frame = report_run
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((run_dir.parent.parent / "history.html").as_uri())
    assert page.locator("tbody#cells tr").count() == len(frame)
    link = page.locator("[id='cell-wrong/fp32/ort-1.17'] a")
    assert link.count() == 1 and "fail" in page.locator("[id='cell-wrong/fp32/ort-1.17'] td").get_attribute("class")
    assert link.get_attribute("href") == f"runs/{run_dir.name}/report.html#cell-wrong/fp32/ort-1.17"
    assert link.inner_text() == f"{frame.set_index('cell_id').loc['wrong/fp32/ort-1.17', 'max_abs']:.1e}"
    assert errors == []
    page.close()


def test_the_gpu_filter_keeps_the_columns_of_one_gpu(browser, tmp_path):
    """On the committed H100 run (reports/examples/h100-torch), re-rendered by this code: picking the
    H100 hides the CPU environment's column, and 'all' brings it back."""
    import json

    import pandas as pd

    from conftest import REPO
    from matrix.report.html import render_report
    from matrix.report.publish import write_rendered

    example = REPO / "reports" / "examples" / "h100-torch"
    frame = pd.read_parquet(example / "results.parquet")
    write_rendered(tmp_path, render_report(frame, json.loads((example / "run.json").read_text())))
    page = browser.new_page(viewport={"width": 1300, "height": 800})
    page.goto((tmp_path / "report.html").as_uri())
    options = page.locator("#gpu-filter option").all_inner_texts()
    assert options[0] == "all" and sorted(options[1:]) == ["NVIDIA H100 80GB HBM3", "no GPU"]
    cpu_cell = page.locator("[id='cell-gemm_mha_fp16/batch=1/fp32/torch-host-cpu']")
    cuda_cell = page.locator("[id='cell-gemm_mha_fp16/batch=1/fp32/torch-host-cuda']")
    page.select_option("#gpu-filter", "NVIDIA H100 80GB HBM3")
    assert cuda_cell.is_visible() and not cpu_cell.is_visible()
    assert not page.locator("#env-torch-host-cpu").is_visible()
    page.select_option("#gpu-filter", "")
    assert cpu_cell.is_visible() and cuda_cell.is_visible()
    # One torch version on CPU and GPU: the upgrade view still starts on two different environments.
    assert page.locator("#env-a").input_value() != page.locator("#env-b").input_value()
    # A cell that never ran (routed away from this GPU) says why, and shows no metric as measured.
    page.locator("[id='cell-layernorm_block/batch=2/fp32/torch-host-cuda']").click()
    page.locator("#details h3").first.wait_for()
    details = page.locator("#details").inner_text()
    assert "Why it was skipped" in details and "*A100*" in details
    assert "undefined" not in details and "\nError\n" not in details
    page.close()


def test_a_page_copied_without_its_details_folder_says_where_the_details_are(browser, report_run, tmp_path):
    """The details live beside the page (report-details/): a page copied alone says so, never an empty panel."""
    import shutil

    run_dir, _ = report_run
    shutil.copy(run_dir / REPORT, tmp_path / "report.html")
    page = browser.new_page()
    page.goto((tmp_path / "report.html").as_uri())
    page.locator("[id='cell-wrong/fp32/ort-1.32']").click()
    page.locator("#details p").first.wait_for()
    assert "report-details/0.js beside report.html, which could not be loaded" in page.locator("#details").inner_text()
    page.close()


def test_the_release_note_summary_says_which_versions_never_ran(report_run):
    from matrix.report.markdown_summary import summary_markdown

    _, frame = report_run
    table = {line.split(" | ")[0]: line for line in summary_markdown(frame, {}, None, None, {}, {}, "").splitlines()
             if line.startswith("| ")}
    assert "| tensorrt 10.8.0.43 (declared, not run) |" in table["| trt-10.8"]
    assert "| onnxruntime 1.32.0 |" in table["| ort-1.32"]


def test_escape_closes_the_details_the_page_says_no_tensorrt_output_was_compared_and_reproduce_runs(page, report_run):
    """What a reader met: Escape did nothing; a column of errors mixed 0.0044147 and 2.686e-4; the
    page never said that no TensorRT output was compared; the command to reproduce a cell alone
    worked only with the venv activated."""
    run_dir, frame = report_run
    said = page.locator("#tensorrt-truth").inner_text()
    assert said.startswith("No TensorRT output was compared with a reference: full TensorRT's 3 cells were skipped")
    assert "needs an NVIDIA GPU host with Docker" in said
    page.click("[id='cell-wrong/fp32/ort-1.32']")
    details = page.locator("#details")
    details.wait_for(state="visible")
    outputs = details.locator("table").nth(1)  # the outputs table: one format per column of errors
    for column in (5, 6):  # max_abs, max_rel
        value = outputs.locator(f"tr:nth-child(2) td:nth-child({column + 1})").inner_text()
        assert re.fullmatch(r"\d\.\d{3}e[+-]\d+", value), value
    command = details.locator("h3:has-text('Reproduce this cell alone') + pre").inner_text()
    page.keyboard.press("Escape")
    assert details.is_hidden()
    ran = subprocess.run(command, shell=True, cwd="/", capture_output=True, text=True)  # from any folder, as written
    assert ran.returncode == 0, ran.stderr
    assert "wrong/fp32/ort-1.32" in ran.stderr and "fail" in ran.stderr


SCREENSHOTS = os.environ.get("TRTMATRIX_SCREENSHOTS")  # a folder to keep the screenshots in, to look at them


def test_the_default_matrix_shows_its_tensorrt_columns_at_1400_by_900(browser, tmp_path):
    """Issue 44, point 4: at 1400 × 900 the default matrix's 17 columns do not fit; TensorRT's must
    be the ones in view, under their engine's name, no header broken inside a word, and the column
    picker must bring the onnxruntime columns into view. The default matrix's real plan (its 391
    cells, 17 environments), each cell with the status a host without a GPU gives it (full
    TensorRT skipped, TensorRT-RTX built, onnxruntime passing): the layout is the subject, not the
    numbers, which are made up here."""
    from conftest import REPO
    from matrix.report.html import render_report
    from matrix.report.publish import write_rendered
    from matrix.store import to_frame
    from matrix.store.records import empty_record

    plan = build_plan(REPO / "matrix.toml")
    records = []
    for i, cell in enumerate(plan.cells):
        envdef = plan.envs[cell.env]
        status = {"tensorrt-rtx": "built", "tensorrt": "skipped"}.get(envdef.label, "pass")
        records.append(empty_record(
            run_id="layout", cell_id=cell.cell_id, row_id=cell.row_id, case=cell.case, params=dict(cell.params),
            profile=cell.profile, env=cell.env, engine=envdef.label, env_version=envdef.version, status=status,
            engine_version=None if status == "skipped" else envdef.version, build_s=12.5 if status == "built" else None,
            max_abs=10.0 ** -(3 + i % 5) if status == "pass" else None, atol=1e-4,
            error={"skipped": "needs an NVIDIA GPU host with Docker", "built": "not run: no GPU"}.get(status)))
    write_rendered(tmp_path, render_report(to_frame(records), {"run_id": "layout", "config": "matrix.toml"}))
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((tmp_path / "report.html").as_uri())
    in_view = """() => { const names = document.querySelector('#matrix thead th.row').getBoundingClientRect().right;
        return [...document.querySelectorAll('#matrix thead th[data-gpu]')].filter(th => { const box = th.getBoundingClientRect();
            return box.width > 0 && box.left >= names - 1 && box.right <= innerWidth; }).map(th => th.id.slice(4)); }"""
    seen = page.evaluate(in_view)
    full = [name for name, envdef in plan.envs.items() if envdef.label == "tensorrt"]
    rtx = [name for name, envdef in plan.envs.items() if envdef.label == "tensorrt-rtx"]
    assert len(full) == 6 and len(rtx) == 5 and len(plan.envs) == 17
    assert set(full) <= set(seen), f"in view at 1400 px: {seen}"
    assert seen[:len(full)] == page.evaluate("() => [...document.querySelectorAll('#matrix thead th[data-engine=TensorRT][data-gpu]')]"
                                             ".map(th => th.id.slice(4))")
    assert page.locator("#matrix thead th.group").all_inner_texts() == ["TensorRT", "TensorRT-RTX", "onnxruntime"]
    # No name or version breaks inside: each stays on one line ("trt-rtx-1.7-docker" at its hyphens).
    broken = page.evaluate("""() => [...document.querySelectorAll('#matrix thead .nw')]
        .filter(span => span.getClientRects().length !== 1).map(span => span.textContent)""")
    assert broken == []
    if SCREENSHOTS:
        page.screenshot(path=os.path.join(SCREENSHOTS, "default-matrix-1400x900.png"))
    # The column picker: TensorRT's groups unticked, onnxruntime's columns come into view.
    for name in ("TensorRT", "TensorRT-RTX"):
        page.uncheck(f"input[name=engine][value={name}]")
    seen = page.evaluate(in_view)
    assert sorted(seen) == sorted(name for name, envdef in plan.envs.items() if envdef.label == "onnxruntime")
    assert page.locator("#matrix thead th.group:visible").all_inner_texts() == ["onnxruntime"]
    if SCREENSHOTS:
        page.screenshot(path=os.path.join(SCREENSHOTS, "default-matrix-onnxruntime-picked.png"))
    assert errors == []
    page.close()


def next_frame(page):
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def test_a_matrix_of_many_rows_lays_out_only_what_is_in_view_with_the_whole_tables_columns(browser, tmp_path):
    """Issue 44, point 4 (the 50,000-cell page's load: laying the whole table out took 0.9 to 1.3 s
    of it): the page lays out only the rows near the view, yet every cell is in the page, and the
    columns are as wide as the whole table makes them without JavaScript, the widest texts (a long
    row name, an `unsupported` cell, NaN counts) far down included; a row far down, scrolled to,
    lies under its column's header; filtered, the rows still line up. The numbers are made up: the
    layout is the subject."""
    from matrix.report.html import MATRIX_CHUNK, render_report
    from matrix.report.publish import write_rendered
    from matrix.store import to_frame
    from matrix.store.records import empty_record

    envs = ["trt-10.8", "ort-1.17", "ort-1.20", "ort-1.32"]
    records, rows = [], 5 * MATRIX_CHUNK
    for r in range(rows):
        case = "a_case_whose_name_is_long_enough_to_widen_its_column" if r == rows - 3 else f"case{r // 3}"
        for e, env in enumerate(envs):
            status = "unsupported" if (r, e) == (rows - 2, 1) else "skipped" if e == 0 else "fail" if r % 7 == e else "pass"
            nans = 12345 if (r, e) == (rows - 1, 2) else 0
            records.append(empty_record(
                run_id="many", cell_id=f"{case}/fp{r}/{env}", row_id=f"{case}/fp{r}", case=case, params={},
                profile=f"fp{r}", env=env, engine="tensorrt" if e == 0 else "onnxruntime", env_version=env[4:],
                engine_version=None if status == "skipped" else env[4:], status=status, nan_count=nans,
                max_abs=None if status in ("skipped", "unsupported") else 10.0 ** (-8 + r % 11), atol=1e-3,
                error={"skipped": "no GPU", "unsupported": "IR version 10"}.get(status)))
    write_rendered(tmp_path, render_report(to_frame(records), {"run_id": "many", "config": "matrix.toml"}))
    widths = """() => [document.querySelector('#matrix thead th.row'), ...document.querySelectorAll('#matrix thead th[data-gpu]'),
        ...document.querySelector('#matrix tbody tr:last-child').children].map(c => c.getBoundingClientRect().width)"""
    seen = {}
    for javascript in (False, True):
        context = browser.new_context(java_script_enabled=javascript, viewport={"width": 1300, "height": 800})
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((tmp_path / "report.html").as_uri())
        seen[javascript] = page.evaluate(widths)
        assert page.locator("#matrix td.c").count() == rows * len(envs)
        if javascript:
            last = page.locator("#matrix tbody tr").last
            # Far below the view: in the page, not laid out (content-visibility skips it).
            assert not last.evaluate("tr => tr.checkVisibility({contentVisibilityAuto: true})")
            # ... and found by the browser's search of the page's text, which lays it out.
            assert page.evaluate(f"() => window.find('{case} · fp{rows - 1}')")
            next_frame(page)
            assert last.evaluate("tr => tr.checkVisibility({contentVisibilityAuto: true})")
            for cell_id in (f"a_case_whose_name_is_long_enough_to_widen_its_column/fp{rows - 3}/ort-1.32",
                            f"case{(rows - 1) // 3}/fp{rows - 1}/ort-1.20"):
                cell = page.locator(f"[id='cell-{cell_id}']")
                cell.scroll_into_view_if_needed()
                next_frame(page)  # what scrolled into view is laid out before it is painted
                assert shown(cell)
                header = page.locator(f"[id='env-{cell_id.rsplit('/', 1)[1]}']")
                assert cell.evaluate("(td, th) => Math.abs(td.getBoundingClientRect().left - th.getBoundingClientRect().left)",
                                     header.element_handle()) < 0.5
            page.uncheck("input[name=status][value=pass]")
            page.uncheck("input[name=status][value=skipped]")
            kept = page.locator("#matrix tbody tr:visible")
            assert kept.count() == len({r for r in range(rows) for e in range(1, 4) if r % 7 == e} | {rows - 2})
            kept.last.scroll_into_view_if_needed()
            next_frame(page)
            cell = kept.last.locator("td.c").nth(1)
            assert shown(cell) and cell.evaluate(
                "(td, th) => Math.abs(td.getBoundingClientRect().left - th.getBoundingClientRect().left)",
                page.locator("[id='env-ort-1.17']").element_handle()) < 0.5
        assert errors == []
        context.close()
    assert seen[True] == pytest.approx(seen[False], abs=0.5), seen


def test_a_report_of_one_environment_compares_it_with_nothing(browser, tmp_path, cache_dir, tiny_model):
    """Issue 41, second sweep, finding 28f: a one-environment run's upgrade view read "From ort-x to
    ort-x", the environment against itself."""
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(*tiny_model), environments=("ort-1.32",))
    run_dir = MatrixRun(build_plan(config)).execute()
    page = browser.new_page(viewport={"width": 1300, "height": 800})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((run_dir / REPORT).as_uri())
    assert page.locator("#upgrade-lists").inner_text() == "One environment in this run: an upgrade view needs two."
    assert not page.locator("#env-a").is_visible() and errors == []
    page.close()
