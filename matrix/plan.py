"""The plan: cases × parameters × profiles × environments, expanded into cells before anything runs.

Each cell has a readable, stable id (used in URLs and HTML anchors) and a content key: a hash of
everything that decides its result (prepared artifacts, environment definition, profile, worker
code, and the host tools that make onnxruntime's FP16 copy). Equal key → a stored result can be
reused; the backend adds what only it knows (store/cache.py result_key).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .config import CaseEntry, ConfigError, MatrixConfig, Profile, Tolerance, load_config
from .environments.definitions import EnvDef, load_envdefs
from .environments.staging import worker_hash
from .prepare.fingerprint import (EXPORT_TOOLS, external_data_files, option_files, prepare_code_hash,
                                  tool_versions, variant_key)
from .sources import CaseSpec, Params, case_specs, check_known_issue_params, check_known_issues
from .sources.case_files import local_modules
from .sources.known_issues import KnownIssue, load_registry, matrix_registry, registry_path
from .store.cache import cache_folder
from .store.hashing import hash_files, hash_json


def row_words(case: str, params) -> str:
    """'minilm batch=4': a case's row (its artifacts) as progress lines and lock notes name it."""
    return " ".join([case, *(f"{k}={v}" for k, v in dict(params).items())])


@dataclass(frozen=True)
class Cell:
    case: str
    params: Params
    profile: str
    env: str
    artifact_key: str
    content_key: str
    # TensorRT: the rows of the case (params, artifact key) whose input shapes the engine's
    # optimisation profile spans, as one deployed engine serves every batch size; those of them
    # with the same model share one engine (run.py). Empty: the cell's own inputs only.
    span: tuple[tuple[Params, str], ...] = ()
    case_key: str = ""  # row_keys: what the user gave the row ("" for an investigation's trial copy)

    @property
    def row_id(self) -> str:
        return "/".join([self.case, *(f"{k}={v}" for k, v in self.params), self.profile])

    @property
    def cell_id(self) -> str:
        return f"{self.row_id}/{self.env}"


@dataclass
class Plan:
    config: MatrixConfig
    config_path: Path
    cases: dict[str, CaseSpec]
    envs: dict[str, EnvDef]
    cells: list[Cell]
    known_issues: tuple[KnownIssue, ...] = ()
    shard: str | None = None  # "I/N" when this is one part of a sharded plan (shard_plan)
    whole: list[Cell] | None = None  # a shard's: the cells of the whole plan
    empty_shards: tuple[int, ...] = ()  # a shard's: the shards of its split with no cells (they write no run)

    @property
    def plan_key(self) -> str:
        """Names the whole plan (every cell and its content key), shards included: what `merge`
        checks before putting shards together."""
        return hash_json(sorted((c.cell_id, c.content_key) for c in self.whole or self.cells))

    @property
    def left_out(self) -> dict[str, dict[str, str]]:
        """{case: {suite test: why it is not a row}} for the suites of the cases this plan runs."""
        used = {cell.case for cell in self.cells}
        return {name: dict(spec.left_out) for name, spec in self.cases.items() if spec.left_out and name in used}

    @property
    def root(self) -> Path:
        return self.config_path.parent

    def path(self, setting: str) -> Path:
        if setting == "cache_dir":
            return cache_folder(self.root, self.config.run.cache_dir)
        return (self.root / getattr(self.config.run, setting)).resolve()

    def profile(self, name: str) -> Profile:
        return self.config.profiles[name]

    def cell(self, cell_id: str) -> Cell:
        for cell in self.cells:
            if cell.cell_id == cell_id:
                return cell
        raise ConfigError(self.config_path, "cell", f"{cell_id!r} is not a cell of the matrix "
                                                    f"(cells look like {self.cells[0].cell_id!r})")

    def tolerance(self, cell: Cell) -> Tolerance:
        """The matrix file's tolerance; for a suite's test without one there, the suite's own."""
        spec, entry = self.cases[cell.case], self.config.cases[cell.case]
        if spec.suite is not None and cell.profile not in entry.tolerances:
            test = spec.suite_test(cell.params)
            if test.atol is not None and self.profile(cell.profile).precision == "fp32":
                return Tolerance(atol=test.atol, rtol=test.rtol)
        return self.config.tolerance(cell.case, cell.profile)

    @cached_property
    def rows(self) -> list[str]:
        return list(dict.fromkeys(cell.row_id for cell in self.cells))


def artifact_key(spec: CaseSpec, params: Params) -> str:
    return row_keys(spec, params)[1]


def row_keys(spec: CaseSpec, params: Params) -> tuple[str, str]:
    """(case key, artifact key) of a row. The case key is what the user gave it: its files (external
    data included) or its source, parameters, options and the files they name, seed, export settings
    (and the tools that export it), its mask. Two runs' cells of one case key ran the same model on the
    same inputs, whatever trtmatrix did to its reference between them (cli/gate.py; issue 41, sweep 16
    J1: an edited model whose engine outputs stayed the same was excused as trtmatrix's own change).
    The artifact key, what decides the prepared artifacts, adds the host tools' versions and
    prepare's own code."""
    given = _given(spec, params)
    tools = {} if spec.suite is None and not spec.is_onnx_file else {"tools": tool_versions(("onnx",))}
    return hash_json(given), hash_json({**given, **tools, "prepare": prepare_code_hash()})


def _given(spec: CaseSpec, params: Params) -> dict:
    # The case and its parameters are part of every key: two cases of identical files are two
    # rows, and their cells must not share one result folder (two parts of an environment on two
    # Ray nodes removed each other's results there).
    if spec.suite is not None:
        return {"suite_test": spec.suite_test(params).digest, "case": spec.name, "params": params}
    if spec.is_onnx_file:
        paths = spec.onnx_paths(params)
        return {"files": hash_files([*paths.values(), *external_data_files(paths["onnx"])]),
                "case": spec.name, "mask": spec.entry.mask}
    case = spec.torch_case
    return {
        "source": hash_files([case.source, *local_modules(case.source)]),
        "name": spec.name,
        "params": params,
        "options": spec.entry.options,
        "mask": spec.entry.mask,
        "option_files": option_files(spec.entry.options),
        "seed": case.seed,
        "export": case.export,
        "tools": tool_versions(EXPORT_TOOLS),
    }


def content_key(artifact: str, profile: Profile, env: EnvDef, worker_code: str,
                span: tuple[tuple[Params, str], ...] = ()) -> str:
    return hash_json({
        "artifact": artifact,
        "profile": profile.model_dump(mode="json", exclude={"description"}),  # words change no number
        "env": env.definition_hash(),
        "worker": worker_code,
        "variant": variant_key(profile, env.runs_fp16_copy(profile)),
        **({"span": sorted(key for _, key in span)} if len(span) > 1 else {}),  # the shapes a TensorRT engine takes
    })


def engine_span(spec: CaseSpec, rows: list[tuple[Params, str]], env: EnvDef) -> tuple[tuple[Params, str], ...]:
    """The rows a TensorRT engine of this case is built for: every row of the case (a suite's tests
    are models of their own)."""
    return tuple(rows) if env.engine == "tensorrt" and spec.suite is None and len(rows) > 1 else ()


def plan_for_row(plan: Plan, row_id: str, env: EnvDef) -> Plan:
    """One row of a plan in an environment that may not be in its matrix (a release bisect
    makes on the fly): the investigations' way to run one cell like any other."""
    template = next(cell for cell in plan.cells if cell.row_id == row_id)
    rows = list(dict.fromkeys((c.params, c.artifact_key) for c in plan.whole or plan.cells if c.case == template.case))
    span = engine_span(plan.cases[template.case], rows, env)
    cell = Cell(template.case, template.params, template.profile, env.name, template.artifact_key,
                content_key(template.artifact_key, plan.profile(template.profile), env, worker_hash(), span), span,
                template.case_key)
    return Plan(plan.config, plan.config_path, plan.cases, {env.name: env}, [cell], plan.known_issues)


def plan_of_trials(plan: Plan, cell_id: str, models: dict[str, dict[str, Path]] | None = None,
                   profiles: dict[str, Profile] | None = None) -> Plan:
    """Trials of one cell in its own environment, as ordinary cells: other ONNX models of it
    (explain's observed copies: ONNX-file cases {name: {"onnx", "inputs", "expected"}}) or other
    profiles of its case (precision's keep_fp32 sets), each judged with the cell's tolerance."""
    template = plan.cell(cell_id)
    env = plan.envs[template.env]
    tolerance = plan.config.tolerance(template.case, template.profile)
    profiles = profiles or {template.profile: plan.profile(template.profile)}
    code = worker_hash()
    tolerances = {name: tolerance for name in profiles}
    if models:
        timeout_s = plan.config.cases[template.case].timeout_s  # the copies are the cell's model: its deadline
        cases = {name: CaseSpec(name, CaseEntry(profiles=tuple(profiles), tolerances=tolerances, timeout_s=timeout_s,
                                                **{k: str(v) for k, v in files.items()}), Path("/"))
                 for name, files in models.items()}
        rows = [(name, ()) for name in cases]
    else:
        spec = plan.cases[template.case]
        entry = spec.entry.model_copy(update={"profiles": tuple(profiles), "tolerances": tolerances})
        cases = {spec.name: CaseSpec(spec.name, entry, spec.root, spec.torch_case)}
        rows = [(spec.name, template.params)]
    cells = []
    for case, params in rows:
        artifact = template.artifact_key if not models else artifact_key(cases[case], params)
        span = () if models else template.span  # an observed copy is a model of its own
        cells += [Cell(case, params, name, env.name, artifact, content_key(artifact, profile, env, code, span), span,
                       "" if models else template.case_key) for name, profile in profiles.items()]
    config = plan.config.model_copy(update={"profiles": profiles, "cases": {n: s.entry for n, s in cases.items()}})
    return Plan(config, plan.config_path, cases, {env.name: env}, cells, plan.known_issues)


def shard_plan(plan: Plan, index: int, count: int) -> Plan:
    """The `index`-th (1-based) of `count` deterministic parts of the plan, balanced by cells and
    cut by environment first: environments are split (by row order) only while there are fewer
    parts than shards; then the largest part goes to the emptiest shard."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index}/{count}: I must be between 1 and N")
    blocks = [[c for c in plan.cells if c.env == env] for env in plan.envs]
    blocks = [b for b in blocks if b]
    while blocks and len(blocks) < count and max(len(b) for b in blocks) > 1:
        largest = max(blocks, key=len)
        blocks.remove(largest)
        blocks += [largest[:len(largest) // 2], largest[len(largest) // 2:]]
    shards: list[list[Cell]] = [[] for _ in range(count)]
    for block in sorted(blocks, key=lambda b: (-len(b), b[0].cell_id)):
        min(shards, key=len).extend(block)
    chosen = {c.cell_id for c in shards[index - 1]}
    return Plan(plan.config, plan.config_path, plan.cases, plan.envs, [c for c in plan.cells if c.cell_id in chosen],
                plan.known_issues, shard=f"{index}/{count}", whole=plan.cells,
                empty_shards=tuple(i for i, part in enumerate(shards, start=1) if not part))


def build_plan(config_path: Path | str, only_cases: list[str] | None = None,
               only_envs: list[str] | None = None, only_cells: list[str] | None = None) -> Plan:
    config_path = Path(config_path).resolve()
    config = load_config(config_path)
    for flag, chosen, known in (("--case", only_cases, config.cases), ("--env", only_envs, config.run.environments)):
        for name in chosen or ():
            if name not in known:
                raise ConfigError(config_path, flag, f"{name!r} is not in the matrix")
    envs = {e.name: e for e in load_envdefs(config_path.parent / config.run.images_dir,
                                            config.run.environments, config_path)}
    cases = case_specs(config, config_path, {e.engine for e in envs.values()}, only_cases)
    code = worker_hash()
    cells = []
    for name, spec in cases.items():
        keys = {params: row_keys(spec, params) for params in spec.param_grid()}
        rows = [(params, artifact) for params, (_, artifact) in keys.items()]
        for params, (given, artifact) in keys.items():
            for profile in spec.entry.profiles:
                for env in envs.values():
                    if only_envs and env.name not in only_envs:
                        continue
                    span = engine_span(spec, rows, env)
                    cells.append(Cell(name, params, profile, env.name, artifact,
                                      content_key(artifact, config.profiles[profile], env, code, span), span, given))
    if only_cells:
        unknown = sorted(set(only_cells) - {cell.cell_id for cell in cells})
        if unknown:  # one of the matrix's cells outside --case/--env is said so (issue 41, sweep 7, sweep 6 #15)
            case, env = unknown[0].split("/")[0], unknown[0].split("/")[-1]
            where = "is outside the selected cases and environments (--case, --env)" \
                if case in config.cases and env in config.run.environments else "is not a cell of the matrix"
            raise ConfigError(config_path, "--cell", f"{unknown[0]!r} {where}")
        cells = [cell for cell in cells if cell.cell_id in only_cells]
    registry = registry_path(config_path, config)
    known_issues = load_registry(registry)
    check_known_issues(known_issues, config, config_path)
    check_known_issue_params(known_issues, cases, registry)
    known_issues = matrix_registry(config_path, config, known_issues)
    used = {cell.env for cell in cells}  # --env, --case, --cell: only what the cells run in
    return Plan(config, config_path, cases, {n: e for n, e in envs.items() if n in used}, cells, known_issues)
