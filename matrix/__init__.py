"""trtmatrix: numeric compatibility matrix for TensorRT and other inference runtimes.

A map of the package (the flow of one run is plan → prepare → execute → compare → store → report):

    cli/              the `trtmatrix` command: a thin layer over everything below, a module per group of commands
    run.py            one run: each stage in order, and the records it makes
    report/           what people read: report.html, index/history pages, terminal tables, JUnit,
                      the upgrade view, the support matrix page, re-judging a stored run
    investigations/   commands that re-use the run machinery on one cell or row (explain, bisect, precision,
                      repro: a verified folder to file upstream)
    executors/        where an environment's cells run: this host (threads, GPU leases) or a Ray
                      cluster (tasks placed by resources), and the unit every executor runs: one
                      environment's cells set up, looked up in the cache and run through its worker
                      under the host's own deadlines
    plan.py           cases × parameters × profiles × environments → cells with ids and content
                      keys; one shard of N of them (CI job matrices)
    prepare/          host-side artifacts per case: ONNX export, float64 reference, FP16 variants,
                      graph checks, keep_fp32 resolution
    environments/     definitions (images/*.toml), venv and docker backends, images, worker staging, GPUs
    sources/          where cases come from: case files, ONNX files, the known-issue registry
    compare.py        metrics and verdicts against the float64 reference
    store/            records, run folders (and shards merged into one), what a results table must
                      hold, the files a person names (-o), the content-addressed cache layout, hashing
    config.py         the matrix file, validated
    case.py           the API that case files import (@case, Export)
    stops.py          a stop signal, and what must not outlive the process: its temporary files and
                      the processes case code started
    graph_walk.py     what an ONNX graph's nodes read and what each value is computed from: the one
                      walk the reference, prepare and the known-issue registry share
    worker/           runs inside each environment; imports nothing of the rest (stdlib + numpy + engine)

Layers go downward only (import-linter contracts in pyproject.toml, checked by .ci/run). Importing
the package stays cheap: nothing is imported here.
"""
