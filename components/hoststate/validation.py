"""Old path of the GcuValidation provider (components/providers/node_validation.py)."""

from components.providers.node_validation import GcuValidationProvider  # noqa: F401
