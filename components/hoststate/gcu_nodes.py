"""Old path of the GcuNodes provider (components/providers/node_labels.py)."""

from components.providers.node_labels import GcuNodesProvider  # noqa: F401
