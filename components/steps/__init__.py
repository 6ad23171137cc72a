"""Links of the chain that are not components: each declares a bundled (dynamic) resource."""

from .gcu_nodes import GCU_NODES
from .validation import VALIDATION

# Standalone links of the chain (a component's own step is its `then`, in its catalog entry).
STEPS = (GCU_NODES, VALIDATION)
