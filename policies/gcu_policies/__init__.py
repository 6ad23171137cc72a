"""gcu-stack's CrossGuard rules; `policies/__main__.py` serves them as a policy pack."""

from .rules import ALL_POLICIES

PACK_NAME = "gcu-stack-policies"

__all__ = ["ALL_POLICIES", "PACK_NAME"]
