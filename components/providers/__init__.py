"""Engine code: the bundled dynamic providers and the orchestration they run (node labels, the container
runtime on GCU nodes, validation, the driver rollout), and how they reach the cluster.

They run inside `pulumi up` (the engine's Python provider host), never on a node: what runs on nodes is
`components/node/`. Earlier releases' states name these providers under `components/hoststate/`, which
keeps import shims.
"""
