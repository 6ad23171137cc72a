"""Old path of the DriverUpgrade provider (components/providers/driver_rollout.py)."""

from components.providers.driver_rollout import DriverUpgradeProvider  # noqa: F401
