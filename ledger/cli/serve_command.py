"""`ledger serve`: the auditor's web view (``ledger.report.web_view``) in Datasette, read-only."""

from __future__ import annotations

import argparse
import importlib.util
import socket
import subprocess
import tempfile
from pathlib import Path

from ledger.cli.common import EXIT_OK, CommandError, _store, err, out


def cmd_serve(args: argparse.Namespace) -> int:
    from ledger.report.web_view import ServeError, datasette_command, prepare

    if importlib.util.find_spec("datasette") is None:
        raise CommandError("`ledger serve` needs Datasette: pip install -e '.[web]'")
    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port {args.port}: a port is 0-65535")
    _check_port(args.host, args.port)  # before the snapshot and the reports, which take a while
    with tempfile.TemporaryDirectory(prefix="ledger-serve-") as folder:
        with _store(args, create=False, read_only=True) as store:
            try:
                files = prepare(store, Path(folder), progress=lambda line: err.print(line, markup=False))
            except ServeError as exc:
                raise CommandError(str(exc)) from None
        root, size = files.head
        out.print(f"serving a read-only snapshot of the ledger at head {root}:{size}")
        out.print(f"  claims: http://{args.host}:{args.port or 'PORT'}/ledger/claims (Ctrl-C stops)")
        command = datasette_command(files, host=args.host, port=args.port, open_browser=args.open)
        try:
            code = subprocess.run(command, check=False).returncode
        except KeyboardInterrupt:
            return EXIT_OK
    if code not in (0, -2, 130):  # Ctrl-C ends Datasette with SIGINT
        raise CommandError(f"datasette stopped with exit code {code} (its message is above)")
    return EXIT_OK


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port or --host"
            ) from None


def add_parser(commands, with_db) -> None:
    serve = with_db(
        commands.add_parser(
            "serve",
            help="the auditor's web view: the ledger in a browser, read-only",
            description="Serve a read-only snapshot of the ledger in Datasette (immutable mode): every table and "
            "view described, canned queries that follow a claim to its statistical test, to exactly the evidence "
            "rows it computed on, to the checkpoints that read them and their lineage; and the HTML report of "
            "every protocol under /report/. The snapshot is taken when the command starts; the page names its "
            "head. SQLite ledgers only. Needs the web extras: pip install -e '.[web]'.",
        )
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine)")
    serve.add_argument("--port", type=int, default=8001, help="port (default: 8001; 0 picks a free one)")
    serve.add_argument("--open", action="store_true", help="open the claims page in a browser")
    serve.set_defaults(handler=cmd_serve)
