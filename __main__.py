"""gcu-stack: the Enflame GCU software stack on Kubernetes, from a GcuResource blueprint."""

from pathlib import Path

from components.program import main

main(Path(__file__).resolve().parent)
