"""``ledger run``: execute a registered protocol end to end and leave a verifiable ledger.

Order of work, each step committed to the store before the next begins:

1. every base is checked to be on this machine (nothing is written if one is missing);
2. the protocol is registered (or its registration is checked: a changed file is refused);
3. per base: its weights are hashed and recorded as the root checkpoint, and the base is
   read on the guardrail manifests (the reference for the Tier-1 gate);
4. per arm, per stage: train -> checkpoint (safetensors, SHA-256) -> the stage's gates
   (computed from the checkpoint's readings) -> the checkpoint is recorded with its
   status (``failed`` on a failed ``stop`` gate: a hard stop that ends the arm) -> the
   gates' readings are written as evidence;
5. per arm: every evaluation manifest through the shared reader (all loops in one pass);
6. gates between arms; 7. the preregistered claims (first outcomes); 8. the report.

Resuming (``--resume``) skips whatever the store already holds: a stage whose checkpoint
is recorded is loaded, not retrained; a manifest whose evidence is recorded is not
re-read. A stage interrupted mid-way is re-run from its start, and because every draw
is seeded by hashing, it reproduces the same bytes. Nothing outside the registered protocol
changes a reading: the tests' fault injection is a plugin of theirs (``tests/fault_injection.py``),
and the environment record names every ``LEDGER_*`` variable and plugin a run was made with.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.audit.history import version_story
from ledger.protocol.check import check_protocol_file
from ledger.protocol.protocol import Protocol
from ledger.rows.manifest import Manifest
from ledger.run.after_arms import depth_gates, judge_claims, stopped_lineage, summarise, unfinished_arms
from ledger.run.bases import RunRefused, check_bases_available, load_protocol_base, record_base
from ledger.run.progress import Progress
from ledger.run.reading import read_rows
from ledger.run.records import RunRecords
from ledger.run.rehearsal import Rehearsal
from ledger.run.results import ArmOutcome, RunResult
from ledger.run.run_pass import RunPass
from ledger.run.stage_gates import StageGates
from ledger.run.stage_training import StageTraining

if TYPE_CHECKING:
    from ledger.store.lookups import RecordedCheckpoint

log = logging.getLogger("ledger.run")


# ----------------------------------------------------------------------------- the run


class Runner:
    """``ledger run``: one protocol's arms, with its collaborators: ``records`` (what the run writes about itself),
    ``gates`` (a stage's gates) and ``training`` (a stage trained and checkpointed)."""

    def __init__(
        self,
        protocol_path: str | Path,
        *,
        db: str | None,
        out: str | Path | None,
        resume: bool,
        arms: list[str] | None,
        progress: bool = True,
        device: str | None = None,
        compile_choice: str = "auto",
        artifacts: str | Path | None = None,
        judge: bool = True,
        also_db: list[str] | None = None,
        rehearsal: Rehearsal | None = None,
    ):
        self.protocol_path = Path(protocol_path)
        self.also_db = list(also_db or [])  # other ledgers (a team's tuning ledgers) the peeking rules consult
        # complete validation before anything is written: the database is not even opened
        self.checked = check_protocol_file(self.protocol_path)
        self.protocol = self.checked.protocol
        self.protocol_dir = self.protocol_path.resolve().parent
        known = [arm.id for arm in self.protocol.arms]
        # an arm replicated over seeds is named by the name it was written with: every replicate of it
        if arms:
            arms = [r for arm in arms for r in ([x.id for x in self.protocol.replicates_of(arm)] or [arm])]
        unknown = [arm for arm in (arms or []) if arm not in known]
        if unknown:
            raise ValueError(f"unknown arm(s) {', '.join(unknown)} (protocol arms: {', '.join(known)})")
        self.out_dir = Path(out) if out else Path("runs") / self.protocol.name
        self.db = db
        self.progress = progress
        # what every pass does unless it says otherwise (``RunPass``); the CLI's --device wins over the protocol's
        self.built = RunPass(tuple(arms or known), judge, resume, device=device or self.protocol.device)
        self._begin(RunPass())
        self.compile_choice = compile_choice  # torch.compile of the looped block: auto (on a GPU), on, off
        self.compiled_arms: set[str] = set()  # the arms whose block runs compiled (their checkpoints say so)
        self.artifacts = str(artifacts) if artifacts else None  # a folder, or KIND://... (ledger.store.artifacts)
        # read once (``_read_inputs``), before anything is written
        self.manifests: dict[str, Manifest] = {}
        self.manifest_sha: dict[str, str] = {}
        # what a dry run changes (``ledger.run.dry_run``): bases it built, registration rules off, steps left out
        self.rehearsal = rehearsal or Rehearsal()
        self.loaded: dict[str, tuple] = {  # base name -> (model, tokenizer, files)
            name: (model, tokenizer, []) for name, (model, tokenizer) in self.rehearsal.bases.items()
        }
        self.bases: dict[str, tuple] = {}  # base name -> (model, tokenizer, recorded sha)
        self.readers: dict[str, Any] = {}  # base name -> its calibrated reader
        # a tuning run's checkpoints are exploratory: nothing confirmatory may descend from them
        self.status_ok = "exploratory" if self.protocol.purpose == "exploratory" else "promoted"
        self.records = RunRecords(self)
        self.gates = StageGates(self, self.records)
        self.training = StageTraining(self, self.records, self.gates)

    # -- entry point

    def warm(self) -> None:
        """Read ahead what the run reads before it writes (the manifests, the bases and their tokenizers, the
        model library's imports), writing nothing: ``--parallel``'s parent does it once its own group has finished
        while a child still trains, instead of after the last one."""
        from arms.device import resolve_device

        self.device = resolve_device(self.device_choice)
        self._read_inputs()

    def _read_manifests(self) -> None:
        if not self.manifests:
            from ledger.rows.builder import build_manifests
            from ledger.run.preflight import preflight

            manifests = build_manifests(self.protocol)
            # power and the reader's calibration, before any write
            preflight(self.checked, manifests, rules=self.rehearsal.registration_rules)
            self.manifests = manifests
            self.manifest_sha = {name: m.sha256 for name, m in self.manifests.items()}

    def _read_inputs(self) -> None:
        """The manifests, the loaded bases and the reader, each once per runner."""
        import torch

        self._read_manifests()
        torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
        # The reader is built from the bases' tokenizers before registration: a symbol a tokenizer
        # splits is the protocol's error, and a registration it refuses would be one nobody can run.
        self._calibrate_readers()

    def register_only(self) -> str:
        """Register the protocol and nothing else (its SHA-256): what ``--executor slurm`` does before it submits
        the jobs, each of which then finds it registered. The manifests are read and the reader calibrated with
        each base's tokenizer on the CPU first, as a run does before it writes."""
        from arms.device import resolve_device
        from ledger.audit.preregistration import register, registration_of
        from ledger.store import default_db_url, open_other_ledgers, open_store

        check_bases_available(self.protocol, self.protocol_dir, list(self.arm_ids))
        self.device = resolve_device("cpu")
        self._read_inputs()
        store = open_store(self.db or default_db_url())
        try:
            with open_other_ledgers(self.also_db) as also:
                register(
                    store,
                    self.protocol_path,
                    self.checked,
                    self.manifests,
                    also,
                    rules=self.rehearsal.registration_rules,
                )
                return registration_of(store, self.protocol)
        finally:
            store.close()

    def _begin(self, this_pass: RunPass) -> None:
        """This pass's choices, each as the runner was built where the pass leaves it open."""
        built = self.built
        self.arm_ids = list(this_pass.arm_ids or built.arm_ids or ())
        self.judge = built.judge if this_pass.judge is None else this_pass.judge
        self.resume = built.resume if this_pass.resume is None else this_pass.resume
        self.judging_pass, self.judge_only = this_pass.judging_pass, this_pass.judge_only
        self.device_choice: str = this_pass.device or built.device or self.protocol.device

    def run(self, this_pass: RunPass | None = None) -> RunResult | None:
        """The run's result (None on a data-parallel rank other than 0, which records nothing); ``this_pass``: what
        this pass does (every arm, as the runner was built, where None)."""
        self._begin(this_pass or RunPass())
        to_load = [arm_id for arm_id in self.arm_ids if self.protocol.arm(arm_id).base not in self.loaded]
        check_bases_available(self.protocol, self.protocol_dir, to_load)
        from arms.device import deterministic_settings, resolve_device
        from arms.train.distributed import leave, rank_device, world_from_env
        from ledger.audit.preregistration import register, registration_of
        from ledger.store import default_db_url, open_other_ledgers, open_store
        from ledger.store.artifacts import open_artifacts

        # before anything is written: a missing GPU is bad input
        self.world = world_from_env(self.device_choice)
        self.device = resolve_device(rank_device(self.world, self.device_choice))
        deterministic_settings(self.device)  # recorded in each checkpoint's environment
        self._ranks_released = False
        if self.world.parallel:
            _check_shardable(self.protocol, self.arm_ids, self.world.size)
        if not self.world.is_main:
            from ledger.run.follower import follow

            try:
                follow(self)
                return None
            finally:
                leave(self.world)

        # the manifests, power at registration and the reader calibrated with each base's tokenizer, and every
        # --also-db readable: a refusal here leaves no folder and no database behind
        self._read_inputs()
        with open_other_ledgers(self.also_db):
            pass
        url = self.db or default_db_url()
        self.objects = open_artifacts([self.artifacts] if self.artifacts else [], url)  # a bad kind: nothing written
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._start_log()
        self.store = open_store(url)
        try:
            return self._run_main(register, registration_of)
        except BaseException as exc:
            if not self._ranks_released:
                self.world.tell(("abort", str(exc) or type(exc).__name__))  # the other ranks stop too
            raise
        finally:
            self.store.close()
            leave(self.world)

    def _run_main(self, register, registration_of) -> RunResult:
        self._read_inputs()
        from ledger.audit.peeking import refuse_exploratory_peek
        from ledger.store import open_other_ledgers

        with open_other_ledgers(self.also_db) as also:
            register(
                self.store,
                self.protocol_path,
                self.checked,
                self.manifests,
                also,
                rules=self.rehearsal.registration_rules,
            )
            self.sha = registration_of(self.store, self.protocol)
            # a tuning run reads no frozen evaluation problem, even of a protocol registered after this one
            refuse_exploratory_peek(self.store, self.protocol, self.manifests, also)
        log.info("protocol %s registered as %s", self.protocol.name, self.sha)
        if self.judge_only:  # what finished is judged; what did not is named below, not trained here
            missing = set(unfinished_arms(self))
            self.arm_ids = [arm_id for arm_id in self.arm_ids if arm_id not in missing]
        outcomes = [self._run_arm_with_ranks(self.protocol.arm(arm_id)) for arm_id in self.arm_ids]
        self.world.tell(("finished",))  # the other ranks are done: what follows only reads and records
        self._ranks_released = True
        depth_gates(self, outcomes)
        result = RunResult(self.protocol, self.sha, self.out_dir, outcomes)
        result.versions = version_story(self.store, self.protocol.name, self.sha)
        # Claims are judged once every arm has finished, here or in another process on this
        # ledger (`--arms`): an arm still training has gate readings of earlier stages that a
        # claim must not be judged on, and the first judgement is the one the ledger keeps.
        if not self.judge:
            log.info("arms %s done: the claims and the report are left to the judging pass", ",".join(self.arm_ids))
            result.judged = False
            return result
        result.claims_waiting_for = unfinished_arms(self)
        if result.claims_waiting_for:
            log.info(
                "claims not judged yet: arm(s) %s not finished in this ledger", ", ".join(result.claims_waiting_for)
            )
        else:
            result.claims = judge_claims(self)
        result.report = self._report()
        return result

    def _start_log(self) -> None:
        handler = logging.FileHandler(self.out_dir / "run.log", encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        for old in log.handlers:  # a second pass of this runner (--parallel's judging pass) appends again
            old.close()
        log.handlers = [handler, *self.rehearsal.log_handlers()]
        log.setLevel(logging.INFO)
        log.propagate = False

    # -- bases and the reader

    def _loaded_base(self, name: str):
        """The base's model, tokenizer and files, loaded once; nothing is written."""
        if name not in self.loaded:
            from arms.device import place

            spec = self.protocol.bases[name]
            model, tokenizer, files = load_protocol_base(spec, self.protocol_dir)
            self.loaded[name] = (place(model, self.device, spec.autocast), tokenizer, files)
        return self.loaded[name]

    def base(self, name: str):
        """The loaded base with its record in the store (written on first use, after registration)."""
        if name not in self.bases:
            model, tokenizer, files = self._loaded_base(name)
            spec = self.protocol.bases[name]
            self.bases[name] = (model, tokenizer, record_base(self.store, self.objects, name, spec, model, files))
        return self.bases[name]

    def _calibrate_readers(self) -> None:
        """One reader per base of the arms to run (every symbol any manifest can ask for), each calibrated once
        per runner: the judging pass after ``--parallel`` adds the bases of the arms the children trained."""
        from ledger.reader.shared import Reader
        from ledger.run.preflight import calibrate_reader
        from ledger.run.reading import reader_symbols

        symbols = reader_symbols(self.manifests.values())
        for name in sorted({self.protocol.arm(arm_id).base for arm_id in self.arm_ids} - set(self.readers)):
            _, tokenizer, _ = self._loaded_base(name)
            spec = self.protocol.bases[name]
            try:
                reader = Reader(symbols, tokenizer=tokenizer, chat_template=spec.chat_template)
            except ValueError as exc:  # the protocol's rows and this base's tokenizer disagree
                raise ValueError(
                    f"{self.protocol_path}: base {name!r} cannot read this protocol's answers: {exc}"
                ) from None
            calibrate_reader(reader, self.protocol, self.manifests, f"{self.protocol_path} (base {name!r})")
            self.readers[name] = reader

    # -- one arm

    def _run_arm(self, arm) -> ArmOutcome:
        from arms.device import numerics
        from arms.runtime import build_runtime
        from ledger.store import LineageRefused

        outcome = ArmOutcome(arm.id, "complete")
        run_exists = self.store.get("runs", run_id=self.records.run_id_of(arm.id)) is not None
        if run_exists and not self.resume:
            raise RunRefused(
                f"arm {arm.id} of {self.protocol.name} ({self.sha[:12]}) has already run in this ledger: "
                "pass --resume to continue it, or use another --db"
            )
        base_model, tokenizer, base_sha = self.base(arm.base)
        parent, start_from = base_sha, None
        if arm.init_checkpoint is not None:
            start_from = self.store.checkpoint(arm.init_checkpoint)
            if start_from is None:
                raise RunRefused(f"arm {arm.id}: checkpoint {arm.init_checkpoint} is not in this ledger")
        elif arm.init_from is not None:
            stopped = stopped_lineage(self, arm.init_from)
            if stopped is not None:
                # the store refuses to continue a failed lineage: this arm cannot run, the others still do
                outcome.status = "skipped"
                outcome.note = (
                    f"not run: continues from arm {stopped[0]}, whose checkpoint {stopped[1][:12]} failed gate "
                    f"{_failed_gates(self.store, stopped[1])}"
                )
                log.warning("arm %s: %s", arm.id, outcome.note)
                return outcome
            last = self.last_checkpoint(self.records.run_id_of(arm.init_from))
            if last is None:
                raise RunRefused(f"arm {arm.id} continues from arm {arm.init_from}, which has no checkpoint yet")
            start_from = self.store.checkpoint(last)
        if start_from is not None:
            parent = start_from.sha256
        try:  # the store's own lineage rule, before anything of this arm is written
            self.store.check_continuation(parent, child_status=self.status_ok)
        except LineageRefused as exc:
            raise RunRefused(f"arm {arm.id}: {exc}") from None
        run_id = self.records.ensure_run(arm.id, kind="arm")
        autocast = self.protocol.bases[arm.base].autocast
        runtime = build_runtime(arm, base_model, tokenizer, self.readers[arm.base], autocast=autocast)
        with numerics(self.device, autocast):  # the base's forwards' numerics
            self.compile_loop(arm.id, runtime)
            if start_from is not None:
                runtime.load(self._told_load(self.records.artifact(start_from)))
            for stage in arm.stages:
                recorded = self._stage_checkpoint(run_id, stage.id)
                if recorded is not None:
                    if recorded.status == "failed" and self.judging_pass:  # --parallel: a child stopped it; judge
                        outcome.status = "hard_stop"
                        outcome.checkpoints.append(recorded.sha256)
                        outcome.note = f"{_failed_gates(self.store, recorded.sha256)} failed after stage {stage.id}"
                        return outcome
                    if recorded.status == "failed":
                        raise RunRefused(
                            f"arm {arm.id} stage {stage.id}: checkpoint {recorded.sha256[:12]} failed its gates "
                            f"({_failed_gates(self.store, recorded.sha256)}): its lineage cannot be continued"
                        )
                    runtime.load(self._told_load(self.records.artifact(recorded)))
                    self.gates.write_evidence(runtime, arm, stage, recorded.sha256, run_id)
                    parent = recorded.sha256
                    outcome.checkpoints.append(parent)
                    log.info("arm %s stage %s: resumed from checkpoint %s", arm.id, stage.id, parent)
                    continue
                sha, gates = self.training.train(runtime, arm, stage, run_id, parent)
                outcome.checkpoints.append(sha)
                outcome.gates.extend(gates)
                parent = sha
                if any(not g["passed"] and g["action"] == "stop" for g in gates):
                    outcome.status = "hard_stop"
                    outcome.note = "; ".join(
                        f"{g['gate']} failed ({g['detail']['summary']})" for g in gates if not g["passed"]
                    )
                    log.warning("arm %s: hard stop after stage %s: %s", arm.id, stage.id, outcome.note)
                    return outcome
            checkpoint = parent
            self.evaluate_checkpoint(runtime, arm, run_id, checkpoint)
            for manifest_id in arm.evaluation.manifests:
                summarise(self, outcome, run_id, manifest_id, checkpoint)
            return outcome

    def evaluate_checkpoint(self, runtime, arm, run_id: str, checkpoint: str) -> None:
        """Every evaluation manifest of the arm read by this checkpoint (skipped where already recorded)."""
        for manifest_id in arm.evaluation.manifests:
            if not self.records.has_evidence(run_id, manifest_id, checkpoint):
                rows = list(self.manifests[manifest_id].rows)
                with self.bar(f"{arm.id} eval {manifest_id}", len(rows)) as advance:
                    readings = self.evaluate_rows(runtime, arm, manifest_id, rows, progress=advance)
                self.records.write_evidence(run_id, arm.id, manifest_id, checkpoint, readings)

    def compile_loop(self, arm: str, runtime: Any) -> None:
        """``torch.compile`` the arm's looped block where ``--compile`` says (auto: on a CUDA GPU). A compiler
        that fails its first forward and backward leaves the block as it was, said in the log."""
        wanted = self.compile_choice == "on" or (self.compile_choice == "auto" and self.device.type == "cuda")
        if not wanted:
            return
        compiled, failure = runtime.compile_loop()
        if compiled:
            self.compiled_arms.add(arm)
            log.info("arm %s: the looped block runs compiled (torch.compile)", arm)
        elif failure:
            log.warning("arm %s: torch.compile failed (%s); the block runs uncompiled", arm, failure)

    def _run_arm_with_ranks(self, arm) -> ArmOutcome:
        """``_run_arm``, then the other data-parallel ranks are told the arm is done."""
        outcome = self._run_arm(arm)
        self.world.tell(("arm_done", arm.id))
        return outcome

    def _told_load(self, path: Path) -> Path:
        self.world.tell(("load", str(path.resolve())))  # the other ranks load the same file
        return path

    def evaluate_rows(self, runtime, arm, manifest_id: str, rows, progress=None):
        spec = self.protocol.manifest(manifest_id)
        return read_rows(runtime, arm, spec, rows, progress)

    def _stage_checkpoint(self, run_id: str, stage_id: str) -> RecordedCheckpoint | None:
        found = self.store.checkpoints_of_run(run_id, stage=stage_id)
        return found[-1] if found else None

    def last_checkpoint(self, run_id: str) -> str | None:
        found = self.store.checkpoints_of_run(run_id)
        return found[-1].sha256 if found else None

    # -- gates

    def _report(self) -> Path | None:
        try:
            from ledger.report.html import report_for_protocol_name
        except ImportError:
            log.warning("report module not available: no report written")
            return None
        return report_for_protocol_name(self.store, self.protocol.name, self.out_dir)

    # -- progress

    def bar(self, label: str, total: int, show_loss: bool = False):
        return Progress(label, total, enabled=self.progress, show_loss=show_loss)


def _check_shardable(protocol: Protocol, arm_ids: list[str], ranks: int) -> None:
    for arm_id in arm_ids:
        for stage in protocol.arm(arm_id).stages:
            if stage.batch_size < ranks:
                raise ValueError(
                    f"arm {arm_id} stage {stage.id}: batch_size {stage.batch_size} cannot be split over {ranks} ranks"
                )


def _failed_gates(store, sha: str) -> str:
    failed = {gate.gate for gate in store.gate_results([sha]) if not gate.passed}
    return ", ".join(sorted(failed)) or "status failed"
