"""The ``ledger`` command line.

Exit codes (shared by every command):
  0  success
  2  bad input: a protocol, claim file, model file or argument that cannot be used, or the machine refusing
     (a full disk, a permission: one line naming it, no traceback)
  3  refused by the ledger (lineage, preregistration, a changed protocol, a write in `query`)
  4  a recorded file that no longer hashes as the ledger records (``export``, ``run --resume``)
``ledger verify`` adds: 1 an outcome differs from the first recorded one (or a new claim is
not supported), 4 something is tampered, 5 something is unverifiable. ``ledger compare`` adds:
1 the two sides' evidence differs.

The parser and `main` live here; the handlers in ``protocol_commands`` and
``ledger_commands``; exit codes, consoles and ``CommandError`` in ``common``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from pathlib import Path

from ledger.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TAMPERED,
    CommandError,
    err,
    out,
)
from ledger.cli.compare_commands import add_parsers as add_compare_parsers
from ledger.cli.environmental import environmental_failure
from ledger.cli.harness_command import add_parser as add_harness_parser
from ledger.cli.ledger_commands import (
    cmd_db_upgrade,
    cmd_deviate,
    cmd_import,
    cmd_query,
    cmd_register,
    cmd_verify,
)
from ledger.cli.protocol_commands import (
    cmd_check,
    cmd_export,
    cmd_init,
    cmd_manifest,
    cmd_params,
    cmd_pretrain_base,
    cmd_report,
    cmd_run,
    cmd_schema,
    cmd_status,
)
from ledger.cli.serve_command import add_parser as add_serve_parser
from ledger.cli.transparency_commands import add_parsers as add_transparency_parsers

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_REFUSED",
    "CommandError",
    "build_parser",
    "err",
    "main",
    "out",
]


# ----------------------------------------------------------------------------- parser


ALSO_DB_HELP = (
    "another ledger whose runs the peeking rules consult too (a team's tuning ledgers; a ledger-project.yaml above the "
    "protocol can list them for everyone: tuning_ledgers), read-only; repeat it for "
    "several. A confirmatory protocol's frozen rows (its eval manifests and every other manifest its claims "
    "read) may pose no problem a run there read; an exploratory protocol may read none of theirs"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledger",
        description=(
            "A preregistered experiment ledger for retrofitting depth recurrence into pretrained "
            "language models: validate protocols, build hashed row manifests, run arms under one "
            "shared reader, and verify claims from row-level evidence."
        ),
        epilog="Exit codes: 0 success; 2 bad input (located message) or the machine refusing (a full disk); "
        "3 refused by the ledger; 4 a recorded file that no longer hashes as recorded.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    check = commands.add_parser(
        "check",
        help="validate a protocol and summarise it",
        description=(
            "Validate a protocol file completely: schema, references and cross-field rules; what the "
            "registries say each kind supports (an unrunnable kind, an unsupported combination, an option "
            "nothing reads); base metadata against the base itself; claims the protocol's evidence can "
            "decide; manifests built and checked for train/eval contamination. On bad input prints "
            "file:line: field.path: reason and exits 2. `run` and `register` run the same check first."
        ),
    )
    check.add_argument("protocol", help="protocol YAML file")
    check.add_argument(
        "--dry-run",
        action="store_true",
        help=(
            "also run the protocol end to end on its miniature (the fewest rows per manifest, one step per stage, "
            "gates recorded) in a throwaway ledger, and judge every claim there (needs torch; writes nothing)"
        ),
    )
    check.add_argument(
        "--random-weights",
        action="store_true",
        help=(
            "with --dry-run: build each base from its config.json alone (shipped for the protocols' hub ids, or a "
            "local folder's), seeded random weights of the exact shape; no weights needed; dense arms generate 4 "
            "tokens, and a stage whose training state this machine cannot hold steps a part of its tensors (said)"
        ),
    )
    check.add_argument(
        "--memory-limit",
        type=float,
        metavar="GIB",
        help=(
            "with --random-weights: the GiB the dry run keeps under; a stage whose training step (state and "
            "activations beside what the run holds) would pass it steps only the part of its tensors that fits, "
            "and says so (default: 0.8 of what the run holds plus what the machine has free)"
        ),
    )
    check.set_defaults(handler=cmd_check)

    schema = commands.add_parser(
        "schema", help="print the protocol JSON Schema", description="Print the JSON Schema of protocol files."
    )
    schema.add_argument("--out", help="write to this file instead of standard output")
    schema.set_defaults(handler=cmd_schema)

    manifest = commands.add_parser(
        "manifest",
        help="list a protocol's manifests with sizes and hashes; optionally write rows",
        description=(
            "Build every manifest of a protocol and list its size and SHA-256 (over the canonical "
            "rows). With --out, write each manifest's rows as canonical JSONL (DIR/ID.jsonl)."
        ),
    )
    manifest.add_argument("protocol", help="protocol YAML file")
    manifest.add_argument("--out", metavar="DIR", help="folder to write ID.jsonl files into")
    manifest.set_defaults(handler=cmd_manifest)

    def with_db(sub):
        sub.add_argument(
            "--db", metavar="URL", help="SQLAlchemy URL of the ledger (default: $LEDGER_DB or sqlite:///runs/ledger.db)"
        )
        return sub

    register = with_db(
        commands.add_parser(
            "register",
            help="preregister a protocol, its manifests and claims",
            description="Write the canonical protocol, its manifests (rows and hashes) and the claims it preregisters "
            "to the ledger before any result. A registered protocol whose file changed is refused (exit 3) until "
            "`ledger deviate` records the change.",
        )
    )
    register.add_argument("protocol", help="protocol YAML file")
    register.add_argument("--also-db", action="append", metavar="URL", help=ALSO_DB_HELP)
    register.set_defaults(handler=cmd_register)

    deviate = with_db(
        commands.add_parser(
            "deviate",
            help="record a change to a registered protocol",
            description="Record every changed item of a registered protocol (planned vs actual, reason, timing) as "
            "deviations, then register the new version. `ledger verify` flags every claim that depends on a deviated item.",
        )
    )
    deviate.add_argument("protocol", help="the changed protocol YAML file")
    deviate.add_argument("--reason", required=True, help="why the protocol changed")
    deviate.add_argument(
        "--timing",
        required=True,
        choices=["before_data", "after_data", "after_analysis"],
        help="when the change was made relative to the data",
    )
    deviate.set_defaults(handler=cmd_deviate)

    import_ = with_db(
        commands.add_parser(
            "import",
            help="import released row-level predictions through a mapping file",
            description="Bring another group's released rows and predictions (JSONL/CSV, gzip) into the ledger through "
            "a mapping file (see releases/). Correctness is recomputed from predictions and rows; generated text is "
            "read by the shared reader.",
        )
    )
    import_.add_argument("mapping", help="release mapping YAML")
    import_.add_argument("--root", help="folder holding the release files (overrides the mapping's root)")
    import_.set_defaults(handler=cmd_import)

    verify = with_db(
        commands.add_parser(
            "verify",
            help="recompute every claim from row-level evidence and check every hash",
            description="Recompute each claim from the rows, re-hash manifests, rows and checkpoint files, walk the "
            "hash chain, and print per claim its outcome (supported | refuted), integrity (verified | tampered | "
            "unverifiable), figures and reason. Verify only reads: --record records first outcomes, --import imports "
            "the releases that claim files name (an external audit) and registers their claims. A missing database "
            "is an error (exit 2), never created.",
            epilog="Exit codes: 0 all verified and every outcome equals the first recorded one (a claim evaluated for "
            "the first time must be supported); 1 an outcome differs; 2 bad input; 4 something is tampered; "
            "5 something is unverifiable.",
        )
    )
    verify.add_argument("paths", nargs="*", help="claim files or folders (default: claims/)")
    verify.add_argument("--since-head", metavar="ROOT:SIZE", help="also prove the log only grew since this head")
    verify.add_argument(
        "--trusted-head",
        metavar="FILE",
        help="a signed head (from `ledger head --sign`): check its signature with --key, then prove the log "
        "extends it. Without a trusted or written-down head, history is checked for internal consistency only",
    )
    verify.add_argument("--key", metavar="PUB", help="public key file that signed --trusted-head")
    verify.add_argument("--root", help="folder holding release files (overrides a release mapping's root)")
    verify.add_argument(
        "--artifacts",
        metavar="DIR|KIND://...",
        action="append",
        help="also look for checkpoint files in DIR (a folder holding objects/sha256/..., e.g. a moved or "
        "copied run folder), or in an artifact store a plugin registers (KIND://...); may be given more than "
        "once. Default: the ledger's own folder",
    )
    verify.add_argument(
        "--all",
        dest="all_files",
        action="store_true",
        help="also re-hash every recorded checkpoint file, not only those in the lineages the claims read",
    )
    verify.add_argument("--json", action="store_true", help="print a JSON report")
    verify.add_argument(
        "--record",
        action="store_true",
        help="record the first outcome of every claim that has none yet (as `ledger run` does)",
    )
    verify.add_argument(
        "--import",
        dest="import_releases",
        action="store_true",
        help="first import the releases the claim files name (once) and register their claims",
    )
    verify.set_defaults(handler=cmd_verify)

    add_transparency_parsers(commands, with_db)  # key, head, prove, verify-proof
    add_compare_parsers(commands, with_db)  # fingerprint, compare
    add_serve_parser(commands, with_db)
    add_harness_parser(commands)

    query = with_db(
        commands.add_parser(
            "query",
            help="read-only SQL over the ledger (tables and auditor views)",
            description="Run one read-only SQL statement (SELECT/WITH/EXPLAIN). Writes are refused (exit 3), and "
            "on PostgreSQL so are server functions a read-only transaction does not stop (pg_*, lo_*, set_config, "
            "dblink...: see docs/guide.md). Views: v_accuracy_by_arm_depth, v_evidence_by_checkpoint, v_lineage, v_claim_evidence, v_claim_status, "
            "v_final_readings.",
        )
    )
    query.add_argument("sql", help="the SQL statement")
    query.add_argument("--format", choices=["table", "csv", "json"], default="table")
    query.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="stop a statement that runs longer (default 30; exit 2)",
    )
    query.set_defaults(handler=cmd_query)

    run = with_db(
        commands.add_parser(
            "run",
            help="run a protocol end to end: train, gate, evaluate, claims, report",
            description="Register the protocol (preregistration first), build its manifests, and for each arm build it "
            "from its base, run its stages (checkpoint, gates; a failed stop gate is a hard stop that marks the lineage "
            "failed), evaluate every evaluation manifest through the shared reader, then the gates between arms, the "
            "preregistered claims and the report. Bases load from local paths or the local HF cache only: a missing "
            "base stops the run at once (exit 2) with how to point it at local weights, writing nothing.",
            epilog="Exit codes: 0 complete; 2 bad input or a missing base; 3 refused (already run without --resume, a "
            "changed protocol, a failed lineage) or a hard stop happened; 4 a recorded checkpoint that no longer "
            "hashes as recorded.",
        )
    )
    run.add_argument("protocol", help="protocol YAML file")
    run.add_argument("--out", help="output folder (default runs/PROTOCOL-NAME): run.log and the report")
    run.add_argument(
        "--device",
        help="where the arms run: auto (default: the first CUDA GPU, else the CPU), cpu, cuda or cuda:N; "
        "overrides the protocol's `device` (which is not part of its hash)",
    )
    run.add_argument(
        "--compile",
        choices=("auto", "on", "off"),
        default="auto",
        help="torch.compile the looped block's layers: auto (default) on a CUDA GPU, off on the CPU; a checkpoint "
        "trained compiled records it (compiled_block) beside its device",
    )
    run.add_argument(
        "--artifacts",
        metavar="DIR|KIND://...",
        help="folder whose objects/sha256/ holds the checkpoint files (default: the SQLite ledger's folder, "
        "else ./runs, or $LEDGER_ARTIFACTS), or an artifact store a plugin registers (KIND://...)",
    )
    run.add_argument("--resume", action="store_true", help="continue a run from what the ledger already holds")
    run.add_argument("--also-db", action="append", metavar="URL", help=ALSO_DB_HELP)
    run.add_argument("--arms", help="comma-separated arm ids to run (default: all)")
    run.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="run the arms in N processes writing into one ledger: this one trains the heaviest group (its "
        "progress shown), N-1 children the others, logging to OUT/parallel-K.log (GPUs round robin; an arm "
        "continuing from another stays with it); then judge the claims. Data-parallel training of one arm: "
        "torchrun (README)",
    )
    run.add_argument(
        "--executor",
        choices=("local", "slurm"),
        default="local",
        help="local (default): here; slurm: register, then submit each arm group (an init_from chain stays "
        "together) as a Slurm job and the judging as a job after them, print the job ids and logs "
        "(OUT/slurm/) and return; `ledger status` follows them. The jobs share the --db ledger (PostgreSQL, "
        "or SQLite on a shared disk) and --artifacts; a requeued or preempted job resumes from its last checkpoint",
    )
    run.add_argument("--partition", help="slurm: the partition to submit to (default: the cluster's)")
    run.add_argument(
        "--gpus-per-job",
        type=int,
        default=None,
        metavar="N",
        help="slurm: GPUs per arm group's job (default 1 where --device is not cpu, else 0); more than one runs "
        "the group under torchrun on the node's GPUs",
    )
    run.add_argument("--time", help="slurm: each job's time limit (HH:MM:SS or D-HH:MM:SS)")
    run.add_argument("--cpus-per-job", type=int, metavar="N", help="slurm: CPUs per job")
    run.add_argument(
        "--sbatch-option",
        action="append",
        metavar="OPTION",
        help="slurm: another sbatch option for every job, e.g. --sbatch-option=--account=lab (repeatable)",
    )
    run.add_argument(
        "--judge-only",
        action="store_true",
        help="judge the claims and write the report from what the ledger holds, training nothing: an arm that "
        "has not finished is named, and the claims wait for it (what --executor slurm's judging job runs)",
    )
    run.add_argument(
        "--no-judge",
        action="store_true",
        help="train and evaluate the arms only: no claims judged, no report (what --parallel's children do; a "
        "later `ledger run --resume` judges and reports)",
    )
    run.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars, the model library's own (loading weights) included; the log still records progress",
    )
    run.set_defaults(handler=cmd_run)

    report = with_db(
        commands.add_parser(
            "report",
            help="write the HTML report of a protocol or imported release",
            description="Write OUT/report.html with PNG figures (per-depth accuracy with the training support shaded, "
            "per-loop heatmaps, accuracy vs latency, the claims table, the lineage tree), read from the ledger.",
        )
    )
    report.add_argument("name", help="protocol or release name")
    report.add_argument("--out", help="output folder (default runs/NAME)")
    report.add_argument(
        "--version",
        help="only this registered version: its runs and the claims it preregistered (default: every version)",
    )
    report.set_defaults(handler=cmd_report)

    export = with_db(
        commands.add_parser(
            "export",
            help="write a recorded checkpoint as a loadable model folder",
            description="Write OUT/ with the arm's base (config, weights, tokenizer as transformers saves them), the "
            "checkpoint's file byte for byte, and ledger-export.json (the registered protocol, the arm, the SHA-256), "
            "so that `arms.export.load_exported(OUT)` rebuilds the retrofitted model. With --format hf, OUT/ is a "
            "Hugging Face model folder instead: AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True, "
            "num_loops=T) loads it where the ledger is not installed, and lm-eval's own hf model evaluates it "
            "(--model hf --model_args pretrained=OUT,trust_remote_code=True,num_loops=T). Nothing is "
            "written if the checkpoint cannot be found or does not fit its arm.",
        )
    )
    export.add_argument("checkpoint", help="the checkpoint's SHA-256 (at least 8 leading hex digits)")
    export.add_argument("--out", required=True, help="output folder (must not exist)")
    export.add_argument(
        "--artifacts",
        metavar="DIR|KIND://...",
        action="append",
        help="also look for the checkpoint file in DIR (repeatable)",
    )
    export.add_argument(
        "--format",
        choices=("ledger", "hf"),
        default="ledger",
        help="ledger: this project's folder, loaded by arms.export.load_exported (default); hf: a Hugging Face "
        "model folder with its own modeling file (torch and transformers only)",
    )
    export.add_argument(
        "--num-loops",
        type=int,
        metavar="T",
        help="hf: the loop count the folder's config sets (default: the deepest loop the arm's evaluation reads); "
        "from_pretrained(..., num_loops=T) changes it",
    )
    export.set_defaults(handler=cmd_export)

    status = with_db(
        commands.add_parser(
            "status",
            help="where each arm of a protocol stands: queued, running (stage, step), finished, stopped or failed",
            description="Read each arm's state from the ledger (stages recorded, evaluation evidence, hard stops) "
            "and, for `ledger run --executor slurm`, from the scheduler (the jobs in OUT/slurm/jobs.json): "
            "queued with Slurm's reason, running at a stage and step, or ended without finishing (failed, with "
            "the job's state and the last line of its log). Writes nothing.",
            epilog="Exit codes: 0 shown; 2 bad input (no such file, a protocol this ledger has not registered).",
        )
    )
    status.add_argument("protocol", help="protocol YAML file")
    status.add_argument("--out", help="the run's output folder (default runs/PROTOCOL-NAME), where OUT/slurm/ is")
    status.add_argument("--json", action="store_true", help="the states as JSON")
    status.set_defaults(handler=cmd_status)

    init = commands.add_parser(
        "init",
        help="write a protocol and claim file for your own model",
        description=(
            "Write PROTOCOLS/NAME.yaml and CLAIMS/NAME.yaml under --out-dir for MODEL from a template: the "
            "split-bridge Phase A (arms A, B, C) or design M's concat retrofit (arms M, M_flat, C). The model's "
            "own files fill the source, dtype, SHA-256, layer count, chat template and the cut (the papers' "
            "proportions); the choices they cannot tell (steps, learning rates) are the template's, marked TUNE. "
            "Read without torch; writes nothing if the model cannot be read or a file exists (exit 2)."
        ),
    )
    init.add_argument(
        "model",
        help="a local Hugging Face model folder (config.json + safetensors), a .gguf file, package:MODULE/FILE, "
        "or a hub id in the local Hugging Face cache",
    )
    init.add_argument("--template", choices=["phaseA", "designM"], default="phaseA", help="(default: phaseA)")
    init.add_argument("--name", help="the protocol's name (default: TEMPLATE-MODEL)")
    init.add_argument("--out-dir", default=".", help="where protocols/ and claims/ go (default: .)")
    init.add_argument("--seed", type=int, default=1, help="the protocol's seed (default: 1)")
    init.set_defaults(handler=cmd_init)

    pretrain = commands.add_parser(
        "pretrain-base",
        help="pretrain a tiny base from scratch on the local synthetic corpus",
        description="Pretrain a small Qwen2 base on a synthetic corpus (single-hop table lookups, copying, "
        "arithmetic, the Tier-1 format; never iteration) as a recipe file says, deterministically from its seed. "
        "Writes OUT/ (weights, tokenizer, recipe copy, SHA256, train.log, summary.json) atomically.",
    )
    pretrain.add_argument("recipe", help="recipe YAML (e.g. bases/tiny-base.recipe.yaml)")
    pretrain.add_argument("--out", required=True, help="output folder (must not exist)")
    pretrain.add_argument(
        "--max-steps", type=int, help="stop after this many steps (the schedule still spans the recipe)"
    )
    pretrain.add_argument("--no-progress", action="store_true", help="no progress bar")
    pretrain.set_defaults(handler=cmd_pretrain_base)

    params = commands.add_parser(
        "params",
        help="trainable parameters and inference cost of every arm (no weights loaded)",
        description="Count each arm's trainable parameters (full-block: block + bridge; adapter: LoRA + bridge; "
        "dense: the whole model) and its inference cost at T loops relative to one base forward, from the bases' "
        "configs alone (built on the meta device).",
    )
    params.add_argument("protocol", help="protocol YAML file")
    params.add_argument("--loops", default="1,4,8,12", help="loop counts for the cost columns (default 1,4,8,12)")
    params.set_defaults(handler=cmd_params)

    db = commands.add_parser("db", help="database maintenance", description="Database maintenance.")
    db_commands = db.add_subparsers(dest="db_command", metavar="DB_COMMAND")
    db_commands.required = True
    upgrade = with_db(db_commands.add_parser("upgrade", help="migrate the ledger's schema to this version"))
    upgrade.set_defaults(handler=cmd_db_upgrade)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # `--help` ends here: nothing heavier than argparse and rich is imported
    from ledger.plugins import PluginError, load_plugins
    from ledger.protocol.loader import ProtocolError

    try:
        load_plugins()  # a plugin's kinds are registered before any protocol is read
        return args.handler(args)
    except PluginError as exc:
        err.print(f"error: {exc}", markup=False)
        return EXIT_BAD_INPUT
    except ProtocolError as exc:
        for issue in exc.issues:
            err.print(str(issue), markup=False)
        return EXIT_BAD_INPUT
    except CommandError as exc:
        err.print(str(exc), markup=False)
        return exc.code
    except Exception as exc:  # the store's own refusals (lineage, preregistration) are exit 3
        from ledger.checked_file import ArtifactMismatch
        from ledger.inputs import InputFileError
        from ledger.store import DatabaseUnavailable, LineageRefused, PreregistrationRequired, database_refusal
        from ledger.store.artifacts import ArtifactOutsideRoot

        if isinstance(exc, ArtifactMismatch):  # a recorded file that no longer hashes as recorded: tampered
            err.print(f"refused: {exc}", markup=False)
            return EXIT_TAMPERED
        if isinstance(exc, (LineageRefused, PreregistrationRequired, ArtifactOutsideRoot)):
            err.print(f"refused: {exc}", markup=False)
            return EXIT_REFUSED
        if isinstance(exc, (DatabaseUnavailable, InputFileError)):  # a bad --db URL, no server, an unreadable file
            err.print(f"error: {exc}", markup=False)
            return EXIT_BAD_INPUT
        if isinstance(exc, BrokenPipeError):  # `ledger query ... | head`: the reader has what it wanted
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return EXIT_OK
        environmental = environmental_failure(exc)
        if environmental is not None:  # a full disk, a permission, a missing device: the machine, not a bug
            err.print(f"error: {environmental}", markup=False)
            return EXIT_BAD_INPUT
        refusal = database_refusal(exc)
        if refusal is not None:  # locked, a damaged file, a dropped connection: the driver's own line
            err.print(f"error: the database refused: {refusal}", markup=False)
            return EXIT_BAD_INPUT
        if os.environ.get("LEDGER_DEBUG", "").lower() in ("1", "true", "yes"):
            raise
        # a failure no check foresaw: one line and its own exit code, the traceback on request
        where = traceback.extract_tb(exc.__traceback__)[-1]
        err.print(
            f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            f"(at {Path(where.filename).name}:{where.lineno}; LEDGER_DEBUG=1 shows the traceback; please report it)",
            markup=False,
        )
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
