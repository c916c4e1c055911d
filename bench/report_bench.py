"""How big is report.html and how fast does it render and load, at 100, 1,000 and 5,000 cells?

Synthetic runs with the shape of a real nightly matrix (rows = case × params × profile,
columns = environments; 5% failures with 40-line log tails, 10% skipped). Times: jinja2 render
in Python, then page load and one filter click in headless Chromium (Debian's chromium through
Playwright). The ratio column is against the 100-cell baseline measured in the same run.

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
from matrix.store import to_frame  # noqa: E402

ENVS = [f"ort-1.{m}" for m in (17, 20, 32)] + [f"trt-{v}" for v in ("8.6", "9.3", "10.0.0", "10.0.1.6", "10.7", "10.8")]
SIZES = [100, 1000, 5000]  # 5,000: a nightly suite run; it should open in under 2 s
REPEATS = 3
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
            render, load, click = [], [], []
            for _ in range(REPEATS):
                start = time.perf_counter()
                html = render_report(frame, {"run_id": "bench", "config": "matrix.toml"})
                render.append(time.perf_counter() - start)
                path = Path(tmp) / f"report-{size}.html"
                path.write_text(html)
                page = browser.new_page()
                start = time.perf_counter()
                page.goto(path.as_uri(), wait_until="load")
                load.append(time.perf_counter() - start)
                start = time.perf_counter()
                page.uncheck("input[name=status][value=pass]")
                page.locator("#matrix tbody tr:visible").first.wait_for()
                click.append(time.perf_counter() - start)
                page.close()
            results.append((len(frame), len(html.encode()), statistics.median(render), statistics.median(load),
                            statistics.median(click)))
        browser.close()
    base = results[0]
    print(f"{'cells':>6} {'size KiB':>9} {'render s':>9} {'load s':>7} {'filter s':>9} "
          f"{'size/base':>9} {'load/base':>9}")
    for cells, size, render, load, click in results:
        print(f"{cells:>6} {size / 1024:>9.0f} {render:>9.3f} {load:>7.3f} {click:>9.3f} "
              f"{size / base[1]:>9.1f} {load / base[3]:>9.1f}")


if __name__ == "__main__":
    main()
