"""Which Kubernetes versions gcu-stack supports, and what a cluster's /version says it is.

The range is data: the oldest minor version the whole suite is proven on, and the newest. A cluster older than
the oldest is refused before anything is declared (its API lacks what the stack's objects use, or nobody has run
them there); one newer than the newest is used, with a warning that it is not proven yet.
"""

from __future__ import annotations

import re
from typing import Optional

OLDEST_SUPPORTED = (1, 33)
NEWEST_PROVEN = (1, 37)


def _number(text: object) -> Optional[int]:
    """'33' or '33+' (as some managed clusters report their minor version) as 33; None when absent or not a number."""
    match = re.match(r"\s*(\d+)", str(text or ""))
    return int(match.group(1)) if match else None


def effective_version(info: dict) -> Optional[tuple[int, int]]:
    """The (major, minor) a cluster behaves as: the version its API server emulates (--emulated-version, shown in
    /version since 1.33) or else its own; from gitVersion when the major/minor fields are empty."""
    for major_key, minor_key in (("emulationMajor", "emulationMinor"), ("major", "minor")):
        major, minor = _number(info.get(major_key)), _number(info.get(minor_key))
        if major is not None and minor is not None:
            return major, minor
    match = re.match(r"v?(\d+)\.(\d+)", str(info.get("gitVersion") or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def describe(info: dict) -> str:
    """'Kubernetes 1.32 (kube-apiserver v1.33.4 emulating 1.32)' or 'Kubernetes 1.33 (v1.33.4)'."""
    version = effective_version(info)
    shown = _text(version) if version else "of an unknown version"
    git = info.get("gitVersion") or "no gitVersion"
    if version and version != effective_version({"major": info.get("major"), "minor": info.get("minor"), "gitVersion": git}):
        return f"Kubernetes {shown} (kube-apiserver {git} emulating {shown})"
    return f"Kubernetes {shown} ({git})"


def supported_range() -> str:
    if OLDEST_SUPPORTED == NEWEST_PROVEN:
        return _text(OLDEST_SUPPORTED)
    return f"{_text(OLDEST_SUPPORTED)} to {_text(NEWEST_PROVEN)}"


def refusal(info: dict, where: str) -> Optional[str]:
    """Why the cluster `where` is refused, or None. A cluster whose version cannot be read is not refused here: the
    commands that need it say so themselves."""
    version = effective_version(info)
    if version is None or version >= OLDEST_SUPPORTED:
        return None
    return (f"refused: {where} runs {describe(info)}, older than gcu-stack supports ({supported_range()}; "
            f"README: Supported Kubernetes versions). Nothing was done. Upgrade the cluster to "
            f"{_text(OLDEST_SUPPORTED)} or newer, or point the stack at another cluster.")


def caution(info: dict, where: str) -> Optional[str]:
    """A warning for a cluster newer than any gcu-stack is proven on, or None."""
    version = effective_version(info)
    if version is None or version <= NEWEST_PROVEN:
        return None
    return (f"{where} runs {describe(info)}, newer than the newest version gcu-stack is proven on "
            f"({_text(NEWEST_PROVEN)}); going on. Report anything that misbehaves with this version.")
