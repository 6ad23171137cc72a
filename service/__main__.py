"""`python -m service serve`: gcu-upgrade-manager's API over this project's stacks (scripts/gcu-stack serve runs it).

    serve [--listen HOST:PORT] (--token-file FILE | --no-auth) [--blueprints DIR] [--oplog DIR]
          [--tls-cert FILE --tls-key FILE] [--max-body BYTES] [--project-dir DIR] [--state-dir DIR] [--config-dir DIR]
          [--own-stack NAME]

The Pulumi CLI, backend and secrets passphrase come from the environment (PATH, PULUMI_BACKEND_URL,
PULUMI_CONFIG_PASSPHRASE[_FILE], PULUMI_HOME), as for every gcu-stack command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from service.config import GUM_BLUEPRINTS, GUM_OPLOG, GUM_PORT, ConfigError, build

PASSED_ENV = ("PATH", "HOME", "KUBECONFIG")


def private_tmp(path: Path) -> Path:
    """An empty directory only its owner reads."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m service")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the API")
    serve.add_argument("--listen", default=f"127.0.0.1:{GUM_PORT}", help="HOST:PORT (gum's port by default)")
    serve.add_argument("--token-file", type=Path, help="the bearer token requests must carry")
    serve.add_argument("--no-auth", action="store_true", help="no token (accepted only on a loopback address)")
    serve.add_argument("--blueprints", type=Path, default=GUM_BLUEPRINTS, help="the only directory PUT reads")
    serve.add_argument("--oplog", type=Path, default=GUM_OPLOG, help="where the operations log is written")
    serve.add_argument("--tls-cert", type=Path)
    serve.add_argument("--tls-key", type=Path)
    serve.add_argument("--max-body", type=int, default=64 * 1024)
    serve.add_argument("--project-dir", type=Path, default=Path(__file__).resolve().parent.parent)
    serve.add_argument("--state-dir", type=Path, default=Path(os.environ.get("GCU_STATE_DIR", ".state")))
    serve.add_argument("--config-dir", type=Path, help="where the stacks' Pulumi.<stack>.yaml are (default: the project "
                                                         "directory; in-cluster: the operator's directory)")
    serve.add_argument("--own-stack", help="the stack that deploys this service (in-cluster): a PUT may not change "
                                           "the service's own part, a DELETE removes the rest and keeps the service")
    args = parser.parse_args(argv)

    try:
        config = build(args.project_dir.resolve(), args.state_dir.resolve(), args.listen, args.token_file, args.no_auth,
                       args.blueprints, args.oplog, args.tls_cert, args.tls_key, args.max_body,
                       args.config_dir.resolve() if args.config_dir else None, args.own_stack)
    except ConfigError as error:
        print(f"gcu-stack serve: {error}", file=sys.stderr)
        return 2

    import uvicorn

    from service import shim
    from service.app import create_app
    from service.stacks import StackStore

    env = {k: v for k, v in os.environ.items() if k.startswith("PULUMI_") or k in PASSED_ENV}
    # pulumi-kubernetes leaves a copy of the stack's kubeconfig (credentials included) in $TMPDIR each time its provider
    # starts: the service's go to a directory of its own, emptied when it starts.
    env["TMPDIR"] = str(private_tmp(config.state_dir / "service" / "tmp"))
    pulumi = shutil.which("pulumi", path=env.get("PATH"))
    if not pulumi:
        print("gcu-stack serve: no pulumi CLI on PATH: start the service with `scripts/gcu-stack serve`", file=sys.stderr)
        return 2
    root = shim.write(config.state_dir / "service" / "pulumi", config.state_dir, pulumi)
    store = StackStore(config.project_dir, env, config.state_dir, shim_root=root, config_dir=config.config_dir,
                       own_stack=config.own_stack)
    app = create_app(config, store)
    scheme = "https" if config.tls_cert else "http"
    print(f"gcu-stack serve: {scheme}://{config.host}:{config.port}/gum/v1/gr (blueprints: {config.blueprints_dir}, "
          f"operations log: {config.oplog_dir}/, auth: {'bearer token' if config.token else 'none (loopback)'})",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=config.host, port=config.port, log_level="info",
                ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
                ssl_keyfile=str(config.tls_key) if config.tls_key else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
