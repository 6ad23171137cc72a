"""The service's OpenAPI document, fuzzed by schemathesis against the real service process: whatever a client sends
to any route, with or without the token, the answer is never a server error (5xx) and never an unhandled one.

The stack it serves exists but holds nothing and the blueprints directory is empty, so no request can start a change:
every answer comes from the service's own checks. The seed is fixed, so CI repeats the same requests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service_fixtures import TOKEN, new_stack, running_service

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def test_no_request_gets_a_server_error(tmp_path):
    stack, env = new_stack(tmp_path)
    with running_service(tmp_path / "svc", tmp_path / "project", {**os.environ, **env}) as service:
        done = subprocess.run(
            [str(SCHEMATHESIS), "run", f"{service.url}/openapi.json", "-H", f"Authorization: Bearer {TOKEN}",
             "--checks", "not_a_server_error", "--max-examples", "15", "--seed", "20261128", "--workers", "1",
             "--phases", "examples,coverage,fuzzing", "--request-timeout", "60", "--no-color"],
            capture_output=True, text=True, timeout=900, env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
            cwd=tmp_path,  # its cache (.schemathesis/) goes there
        )
        report = done.stdout[-6000:] + done.stderr[-2000:]
        print(report)
        assert done.returncode == 0, f"{report}\n--- service log ---\n{service.tail()}"
        assert "No issues found" in done.stdout or "passed" in done.stdout, report
        assert stack.get_all_config()["gcu-stack:blueprint"].value == "blueprints/gcu-resource.json"
        errors = [r for r in service.oplog_records() if r["event"] == "error"]
        assert errors == [], errors
