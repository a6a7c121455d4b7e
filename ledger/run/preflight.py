"""What `ledger register`, `deviate` and `run` check before anything is written, beyond the protocol's own
check: power at registration (``ledger.judge.power``: no claim its rows could never support), acquisition
(``ledger.judge.acquisition``: no claim an arm that learnt nothing would support) and the
reader's calibration (``ledger.reader.calibration``: a simulated perfect executor scores 100% through the
reader on every row the protocol's arms are read on; docs/science.md, design S). A failure is bad input, exit 2.

Registration calibrates a reader without a tokenizer (scores, symbol dicts and generated text); a run
calibrates again with each base's tokenizer (full-vocabulary logits, the answer token after the prompt)
once the bases are loaded, still before the ledger is opened.
"""

from __future__ import annotations

from typing import Any

from ledger.audit.preregistration import refuse_unacquired, refuse_unwinnable
from ledger.protocol.check import CheckedProtocol
from ledger.protocol.manifests import GENERATORS
from ledger.protocol.protocol import Protocol
from ledger.reader.calibration import CalibrationError, calibrate
from ledger.reader.shared import Reader
from ledger.run.reading import reader_symbols


class CalibrationRefused(ValueError):
    """The reader fails the perfect-executor calibration on a manifest the protocol's arms are read on."""


def read_manifests(protocol: Protocol, manifests: dict[str, Any]) -> dict[str, Any]:
    """The manifests the reader reads symbols from: every role but training data, loss-read text excluded."""
    return {
        spec.id: manifests[spec.id]
        for spec in protocol.manifests
        if spec.role != "train" and GENERATORS[spec.generator].reading != "loss" and spec.id in manifests
    }


def calibrate_reader(reader: Reader, protocol: Protocol, manifests: dict[str, Any], where: str) -> int:
    """Calibrate ``reader`` on every read manifest; returns the cells checked, or raises ``CalibrationRefused``."""
    cells = 0
    for name, manifest in read_manifests(protocol, manifests).items():
        try:
            cells += calibrate(reader, manifest).cells
        except CalibrationError as exc:
            first = str(exc).strip().splitlines()[0]
            raise CalibrationRefused(
                f"{where}: the reader fails the perfect-executor calibration on manifest {name!r}: {first}"
            ) from None
    return cells


def preflight(checked: CheckedProtocol, manifests: dict[str, Any], *, rules: bool = True) -> None:
    """Power and acquisition at registration (``rules``: a dry run's throwaway ledger, whose handful of rows
    no claim could win, leaves them out), then the tokenizer-free calibration: before any database is opened."""
    if rules:
        refuse_unwinnable(checked.claim_files, manifests)
        refuse_unacquired(checked.claim_files, manifests)
    read = read_manifests(checked.protocol, manifests)
    if read:
        reader = Reader(reader_symbols(read.values()))
        calibrate_reader(reader, checked.protocol, manifests, str(checked.path))
