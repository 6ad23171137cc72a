"""Time to evaluate the full default stack under Pulumi mocks: program start to the last registration.

    .venv/bin/python bench/mock_eval.py [--runs N]

Each run is a fresh interpreter (imports included), as `pulumi preview` would pay.
Target: under 2 s on a 2-core machine.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import sys, time, json
t0 = time.perf_counter()
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from harness import run_program, RecordingMonitor
last = [t0]
original = RecordingMonitor.RegisterResource
def timed(self, request):
    response = original(self, request)
    last[0] = time.perf_counter()
    return response
RecordingMonitor.RegisterResource = timed
run = run_program({"blueprint": sys.argv[1] + "/blueprints/gcu-resource.json"})
print(json.dumps({"seconds": last[0] - t0, "resources": len(run.registrations), "ready": run.outputs["readyResource"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results = []
    for _ in range(args.runs):
        done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout.splitlines()[-1]))
    seconds = [r["seconds"] for r in results]
    print(f"mock evaluation of the default stack: {results[0]['resources']} registrations, readyResource {results[0]['ready']}")
    print(f"  median {statistics.median(seconds):.2f} s, min {min(seconds):.2f} s, max {max(seconds):.2f} s over {len(seconds)} runs")
    print(f"  target 2.00 s: ratio {statistics.median(seconds) / 2.0:.2f} of target")


if __name__ == "__main__":
    main()
