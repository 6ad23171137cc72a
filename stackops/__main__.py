"""`python -m stackops <command>`: what scripts/gcu-stack runs around pulumi (see stackops/__init__.py).

    run-lock --backend URL --state-dir D --project-dir D --stack S   the run lock's file, for flock(1)
    run-lock-holder FILE                             who holds it (the holder writes itself there)
    preflight --project-dir D --stack S --backend URL --state-dir D  clear stale locks and pending operations; exit 1 if locked
    run --backend URL --state-dir D --stack S -- pulumi ARGS         run with a holder record; pulumi's exit status
    cluster-check --project-dir D --stack S                          exit 1 when the stack's pinned context reaches another cluster
    embedded-reset --project-dir D --stack S --kubeconfig K          drop an embedded stack's state when its cluster was rebuilt
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _root(backend: str, state_dir: str) -> Path:
    from stackops.locks import file_backend_root

    return file_backend_root(backend) or Path(state_dir)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m stackops")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("preflight", "run-lock"):
        p = sub.add_parser(name)
        p.add_argument("--project-dir", default=".")
        p.add_argument("--stack", required=True)
        p.add_argument("--backend", default=os.environ.get("PULUMI_BACKEND_URL", ""))
        p.add_argument("--state-dir", default=".state")
    sub.add_parser("run-lock-holder").add_argument("file")
    for name in ("cluster-check", "embedded-reset"):
        p = sub.add_parser(name)
        p.add_argument("--project-dir", default=".")
        p.add_argument("--stack", required=True)
        if name == "embedded-reset":
            p.add_argument("--kubeconfig", required=True)
    run = sub.add_parser("run")
    run.add_argument("--backend", default=os.environ.get("PULUMI_BACKEND_URL", ""))
    run.add_argument("--state-dir", default=".state")
    run.add_argument("--stack", required=True)
    run.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    if args.command == "run-lock":
        from stackops.locks import project_name, run_lock_path

        path = run_lock_path(_root(args.backend, args.state_dir), project_name(Path(args.project_dir)), args.stack)
        path.parent.mkdir(parents=True, exist_ok=True)
        print(path)
        return 0
    if args.command == "run-lock-holder":
        try:
            print(Path(args.file).read_text().strip() or "another gcu-stack command")
        except OSError:
            print("another gcu-stack command")
        return 0
    if args.command == "preflight":
        from stackops import recover

        result = recover(Path(args.project_dir), args.stack, args.backend, Path(args.state_dir))
        for line in result.cleared:
            print(f"==> {line}", file=sys.stderr)
        for line in result.blocked:
            print(f"error: {line}", file=sys.stderr)
        return 0 if result.ok else 1
    if args.command == "cluster-check":
        from stackops.clusters import check

        problem = check(Path(args.project_dir), args.stack)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1
        return 0
    if args.command == "embedded-reset":
        from stackops.clusters import reset_if_rebuilt

        note = reset_if_rebuilt(Path(args.project_dir), args.stack, args.kubeconfig)
        if note:
            print(f"==> {note}", file=sys.stderr)
        return 0
    if args.command == "run":
        from stackops.holders import run as run_holding

        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        return run_holding(_root(args.backend, args.state_dir), args.stack, command)
    return 2


def run(argv: list[str]) -> int:
    """main, with a missing Pulumi CLI said as such (not a traceback): these commands read the stack through it."""
    try:
        return main(argv)
    except FileNotFoundError as error:
        if os.path.basename(str(error.filename or "")) != "pulumi":
            raise
        print("error: no `pulumi` CLI on PATH; run this through scripts/gcu-stack, or first "
              "`eval \"$(scripts/toolchain/pulumi.sh env)\"`", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
