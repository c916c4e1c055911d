"""How big is report.html and how fast does it render and load, at 100, 1,000, 5,000 and 50,000 cells?

Synthetic runs with the shape of a real nightly matrix (rows = case × params × profile,
columns = environments; 5% failures with 40-line log tails, 10% skipped). Times: jinja2 render
in Python, then page load (to the load event, and to the second animation frame after it: the
matrix in view laid out and painted, whatever the page leaves to its first frames), one filter
click (to the filtered matrix painted) and opening one cell's details (fetched from
report-details/ on demand) in headless Chromium (Debian's chromium through Playwright), in a
1400 × 900 window, where it also counts the environment columns in view beside the (sticky) row
names, and how many of them are TensorRT's (the report puts its groups first). The ratio columns
are against the 100-cell baseline measured in the same run.
Goal at 50,000 cells (the node suite over thirty releases, a nightly of many models): the page
≤ 5 MB, loaded and painted in < 2 s, rendered in ≤ 5 s.

    .venv/bin/python bench/report_bench.py
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matrix.store.records import empty_record  # noqa: E402
from matrix.report.html import render_report  # noqa: E402
from matrix.report.publish import write_rendered  # noqa: E402
from matrix.store import to_frame  # noqa: E402

ENVS = [f"ort-1.{m}" for m in (17, 20, 32)] + [f"trt-{v}" for v in ("8.6", "9.3", "10.0.0", "10.0.1.6", "10.7", "10.8")]
SIZES = [100, 1000, 5000, 50000]  # 50,000: thirty releases of the node suite; it should open in under 2 s
REPEATS = 3
# Until the second animation frame: what the page changed is laid out and painted. (Not a wait for
# a `:visible` row: Playwright measures every row to find one, which lays out rows a reader has not
# scrolled to.)
PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
LOG = "\n".join(f"[trtmatrix] build step {i}: layer /encoder/layer.{i}/attention/MatMul fused" for i in range(40))


def synthetic_frame(cells: int, seed: int = 0):
    rng = random.Random(seed)
    records = []
    rows = max(cells // len(ENVS), 1)
    for r in range(rows):
        case, profile = f"case{r // 6}", ["fp32", "fp16", "fp16-softmax-fp32"][r % 3]
        params = {"batch": [1, 4][(r // 3) % 2]}
        for env in ENVS:
            roll = rng.random()
            status = "skipped" if roll < 0.10 else "fail" if roll < 0.15 else "pass"
            max_abs = None if status == "skipped" else 10 ** rng.uniform(-7, -3 if status == "pass" else 3)
            record = empty_record(
                run_id="bench", cell_id=f"{case}/batch={params['batch']}/{profile}/{env}",
                row_id=f"{case}/batch={params['batch']}/{profile}", case=case, params=params, profile=profile,
                env=env, engine="tensorrt" if env.startswith("trt") else "onnxruntime", env_version=env.split("-")[1],
                engine_version=None if status == "skipped" else env.split("-")[1], status=status, verdict=status,
                max_abs=max_abs, max_rel=max_abs, mean_abs=max_abs, rmse=max_abs, cosine=0.9999,
                mismatch_frac=0.0 if status == "pass" else 0.2, nan_count=0, inf_count=0, atol=1e-2, rtol=1e-2,
                build_s=1.5, infer_ms=3.2, error="no NVIDIA GPU on this host" if status == "skipped" else None,
                log_tail=LOG if status == "fail" else "", gpu=None,
                outputs=json.dumps([{"name": "out", "shape": [4, 2], "max_abs": max_abs}]))
            records.append(record)
    return to_frame(records)


def main() -> None:
    flags = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync"]
    results = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=flags)
        for size in SIZES:
            frame = synthetic_frame(size)
            render, load, painted, click, details = [], [], [], [], []
            folder = Path(tmp) / f"run-{size}"
            folder.mkdir()
            for _ in range(REPEATS):
                start = time.perf_counter()
                report = render_report(frame, {"run_id": "bench", "config": "matrix.toml"})
                render.append(time.perf_counter() - start)
                write_rendered(folder, report)
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                start = time.perf_counter()
                page.goto((folder / "report.html").as_uri(), wait_until="load")
                load.append(time.perf_counter() - start)
                page.evaluate(PAINTED)
                painted.append(time.perf_counter() - start)
                columns = page.evaluate("""() => [...document.querySelectorAll('#matrix thead th[id]')]
                    .filter(th => th.getBoundingClientRect().right <= innerWidth).map(th => th.id)""")
                start = time.perf_counter()
                page.locator("#matrix td.c").last.click()  # the last cell: the last details file
                page.locator("#details h3").first.wait_for()
                details.append(time.perf_counter() - start)
                start = time.perf_counter()
                page.uncheck("input[name=status][value=pass]")
                page.evaluate(PAINTED)
                click.append(time.perf_counter() - start)
                assert page.evaluate("() => document.querySelectorAll('#matrix tbody tr[hidden]').length") > 0
                page.close()
            results.append((len(frame), len(report.page.encode()), sum(len(d.encode()) for d in report.details),
                            statistics.median(render), statistics.median(load), statistics.median(painted), statistics.median(click),
                            statistics.median(details), len(columns), sum(c.startswith("env-trt") for c in columns)))
        browser.close()
    base = results[0]
    print(f"{'cells':>6} {'page KiB':>9} {'details KiB':>11} {'render s':>9} {'load s':>7} {'painted s':>9} {'filter s':>9} "
          f"{'details s':>9} {'columns in view':>15} {'TensorRT':>8} {'size/base':>9} {'load/base':>9}")
    for cells, size, detail_bytes, render, load, painted, click, opened, columns, tensorrt in results:
        print(f"{cells:>6} {size / 1024:>9.0f} {detail_bytes / 1024:>11.0f} {render:>9.3f} {load:>7.3f} {painted:>9.3f} {click:>9.3f} "
              f"{opened:>9.3f} {f'{columns} of {len(ENVS)}':>15} {tensorrt:>8} {size / base[1]:>9.1f} {load / base[4]:>9.1f}")
    cells, size, _, render, load, painted, *_ = results[-1]
    print(json.dumps({"cells": cells, "page_mb": round(size / 1e6, 2), "load_s": round(load, 3), "painted_s": round(painted, 3),
                      "render_s": round(render, 3), "goal_met": size <= 5e6 and painted < 2.0 and render <= 5.0}))


if __name__ == "__main__":
    main()
