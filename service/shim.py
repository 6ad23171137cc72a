"""The Pulumi CLI as the service runs it: through `stackops run`, so every command it starts leaves a holder record.

The Automation API runs `<root>/bin/pulumi`. Behind this one, each command runs as `scripts/gcu-stack` runs them
(stackops.holders.run): if the service is killed mid-up, the backend lock left behind is provably stale once the CLI
is gone, and the next operation clears it and resumes, where a lock without a record would need a person.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

# Where stackops is: the service's own source tree (the project it drives may be a copy without it).
SOURCE = Path(__file__).resolve().parent.parent

SCRIPT = """#!/bin/sh
# Written by the gcu-stack service (service/shim.py): run the real Pulumi CLI with a holder record.
PYTHONPATH={source}${{PYTHONPATH:+:$PYTHONPATH}} exec {python} -m stackops run --backend "$PULUMI_BACKEND_URL" \\
    --state-dir {state} --stack "${{GCU_HOLDER_STACK:--}}" -- {pulumi} "$@"
"""


def write(root: Path, state_dir: Path, pulumi: str) -> Path:
    """`root/bin/pulumi`, for auto.PulumiCommand(root=root)."""
    target = root / "bin" / "pulumi"
    target.parent.mkdir(parents=True, exist_ok=True)
    text = SCRIPT.format(source=shlex.quote(str(SOURCE)), python=shlex.quote(sys.executable),
                         state=shlex.quote(str(state_dir)), pulumi=shlex.quote(pulumi))
    spare = target.with_suffix(".new")
    spare.write_text(text)
    spare.chmod(0o755)
    spare.replace(target)
    return root
