"""One run folder from the shards of a plan (`trtmatrix run --shard I/N` on N machines): their
results, per-cell files, references and logs under a new run id, as if one run had done it all.

Shards must be all N parts of one plan (the same `plan_key` in their run.json); anything else is
refused with the reason, since a merged report that silently lacks a part would look complete.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd

from . import (CELLS, REFS, RUN_META, RUNS, SEQUENCE, DamagedRun, _link_or_copy, last_rejudging, next_sequence, read_run,
               read_run_meta, write_digests, write_tables)


class MergeError(Exception):
    """The runs given are not the complete shards of one plan."""


SHARD = re.compile(r"([0-9]+)/([0-9]+)")
# What else merging reads of a shard's run.json, where it is there: (type, type of its items).
OPTIONAL = {"empty_shards": (list, int), "environments": (list, str), "environment_seconds": (dict, (int, float)),
            "left_out": (dict, dict), "rejudged": (list, dict)}


def _shard_number(meta: dict) -> int:
    return int(meta["shard"].split("/")[0])


def _check_shard_meta(run_dir: Path, meta: dict) -> None:
    """What merging reads of a shard's run.json: DamagedRun naming the file and key where it is not
    what `run --shard` writes."""
    found = SHARD.fullmatch(meta["shard"]) if isinstance(meta["shard"], str) else None
    if not found or not 1 <= int(found[1]) <= int(found[2]):
        raise DamagedRun(run_dir / RUN_META, "shard", f"{meta['shard']!r} is not I/N with 1 <= I <= N, a damaged run?")
    for key in ("started", "finished", "plan_key"):
        if not isinstance(meta.get(key), str):
            raise DamagedRun(run_dir / RUN_META, key, f"{'missing' if key not in meta else 'not text'}, a damaged run?")
    for key, (kind, items) in OPTIONAL.items():
        value = meta.get(key, kind())
        if not isinstance(value, kind) or not all(isinstance(v, items) for v in (value.values() if kind is dict else value)):
            raise DamagedRun(run_dir / RUN_META, key, f"not what `run --shard` writes there ({repr(value)[:40]}), "
                                                      "a damaged run?")


def shards(run_dirs: list[Path]) -> list[tuple[Path, dict]]:
    """The shards with their run.json, in shard order, after checking they make one whole plan."""
    metas = []
    for run_dir in run_dirs:
        meta = read_run_meta(run_dir)
        if "shard" not in meta:
            raise MergeError(f"{run_dir.name} is not a shard (it was not run with --shard I/N)")
        _check_shard_meta(run_dir, meta)
        metas.append(meta)
    plans = {m.get("plan_key") for m in metas}
    if len(plans) > 1:
        first = metas[0]
        other = next(m for m in metas if m.get("plan_key") != first.get("plan_key"))
        raise MergeError(f"shards of different plans: {first['run_id']} (shard {first['shard']}) and {other['run_id']} "
                         f"(shard {other['shard']}) ran different cells or cell contents (matrix file, cases, "
                         "environments or trtmatrix differ)")
    counts = {m["shard"].split("/")[1] for m in metas}
    if len(counts) > 1:
        raise MergeError(f"shards of different splits: {', '.join(sorted(m['shard'] for m in metas))}")
    count = int(counts.pop())
    given = [_shard_number(m) for m in metas]
    empty = {i for m in metas for i in m.get("empty_shards", [])}  # they ran nothing and wrote no run
    missing = sorted(set(range(1, count + 1)) - set(given) - empty)
    twice = sorted({i for i in given if given.count(i) > 1})
    if missing or twice:
        problems = ([f"missing {', '.join(f'{i}/{count}' for i in missing)}"] if missing else []) + \
                   ([f"given twice {', '.join(f'{i}/{count}' for i in twice)}"] if twice else [])
        raise MergeError(f"not the {count} shards of one plan: {'; '.join(problems)}")
    _rejudged_alike(metas)
    return sorted(zip(run_dirs, metas), key=lambda pair: _shard_number(pair[1]))


def _rejudging(meta: dict) -> tuple | None:
    """(matrix file, tolerance file) of a shard's last re-judging (`trtmatrix report`), or None."""
    last = last_rejudging(meta)
    return (last.get("config"), last.get("tolerances")) if last else None


def _judged_content(meta: dict) -> str | None:
    """The digest of the matrix file's content a shard's verdicts are of (None: not recorded)."""
    return (last_rejudging(meta) or meta).get("config_digest")


def _rejudged_alike(metas: list[dict]) -> None:
    """Shards whose verdicts are of different files would make a run that is judged by none of them
    (issue 41, sweep 8 A10): all re-judged with the same files, or none; and of one content of the
    matrix file, which one path may hold two of (sweep 10 C6)."""
    kinds = {_rejudging(m) for m in metas}
    if len(kinds) > 1:
        said = "; ".join(f"{m['run_id']} (shard {m['shard']}) " + (
            f"re-judged with {' and '.join(filter(None, _rejudging(m)))}" if _rejudging(m) else "as run")
            for m in metas)
        raise MergeError(f"shards judged with different files: {said}; `trtmatrix report` each with the same files "
                         "(or none re-judged), then merge")
    contents = {_judged_content(m) for m in metas}
    if len(contents) > 1 and None not in contents:
        said = "; ".join(f"{m['run_id']} (shard {m['shard']}) {_judged_content(m)[:19]}…" for m in metas)
        raise MergeError(f"shards judged with different contents of the matrix file: {said}; `trtmatrix report` each "
                         "with the file as it is now, then merge")


def stage_merged(reports_dir: Path, run_id: str, run_dirs: list[Path], order: list[str]) -> tuple[Path, pd.DataFrame]:
    """`<run-id>.partial` with every shard's cells, rows in `order` (cell ids of the plan; others
    last); finish it with report.publish.publish_staged."""
    parts = shards(run_dirs)
    position = {cell_id: i for i, cell_id in enumerate(order)}
    frame = pd.concat([read_run(folder) for folder, _ in parts], ignore_index=True).assign(run_id=run_id)
    rank = frame["cell_id"].map(lambda cell_id: position.get(cell_id, len(position)))
    frame = frame.iloc[rank.argsort(kind="stable")].reset_index(drop=True)
    tmp = reports_dir / RUNS / f"{run_id}.partial"
    try:
        for folder, meta in parts:
            _add_files(folder, tmp, _shard_number(meta))
        write_tables(tmp, frame)
        write_digests(tmp)
        meta = {**_merged_meta(run_id, [meta for _, meta in parts]), SEQUENCE: next_sequence(reports_dir)}
        (tmp / RUN_META).write_text(json.dumps(meta, indent=1))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp, frame


def _add_files(shard: Path, merged: Path, index: int) -> None:
    """Cells and references are named by content, so the same name is the same file; environment
    logs of an environment split over shards are kept apart."""
    for kind in (CELLS, REFS, "envs"):
        (merged / kind).mkdir(parents=True, exist_ok=True)
        for entry in (shard / kind).iterdir() if (shard / kind).is_dir() else ():
            target = merged / kind / entry.name
            if kind == "envs" and target.exists():
                target = target.with_name(f"{entry.stem}.shard{index}{entry.suffix}")
            if target.exists():
                continue
            if entry.is_dir():  # a shard written in the folder-per-cell layout
                shutil.copytree(entry, target, copy_function=_link_or_copy)
            else:
                _link_or_copy(entry, target)


def _merged_meta(run_id: str, metas: list[dict]) -> dict:
    seconds, environments, left_out = {}, [], {}
    for meta in metas:
        seconds.update(meta.get("environment_seconds", {}))
        for case, tests in meta.get("left_out", {}).items():
            left_out.setdefault(case, {}).update(tests)
        environments += [e for e in meta.get("environments", []) if e not in environments]
    return {"run_id": run_id, "started": min(m["started"] for m in metas), "finished": max(m["finished"] for m in metas),
            "host": ", ".join(dict.fromkeys(m.get("host", "?") for m in metas)), "config": metas[0].get("config"),
            "environments": environments, "environment_seconds": seconds, "plan_key": metas[0].get("plan_key"),
            "left_out": left_out, "merged_from": [f"{m['run_id']} (shard {m['shard']})" for m in metas],
            "trtmatrix": metas[0].get("trtmatrix"),
            # the shards' verdicts are of their (alike) re-judging, the latest named: said in run.json and the report
            **({"rejudged": [max((m["rejudged"][-1] for m in metas), key=lambda r: str(r.get("at")))]}
               if _rejudging(metas[0]) else {})}
