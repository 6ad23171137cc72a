"""Every GCU component, one module each; `COMPONENTS` is the registry the shared code reads.

To add a component: write `components/catalog/<name>.py` defining its `ComponentDef`
(and, where it needs them, its spec model, settings, extras, checks, outputs and image
build) and list it below. Its place in the chain is its own `after`; the order here only
breaks ties between links that could roll out at the same time (it is also the order of
`resourceStatuses`).
"""

from __future__ import annotations

from ..model import ComponentDef
from .device_plugin import DEVICE_PLUGIN
from .driver import DRIVER
from .exporter import EXPORTER
from .gcushare_plugin import GCUSHARE_PLUGIN
from .gcushare_scheduler import GCUSHARE_SCHEDULER
from .gfd import GFD
from .nfd import NFD
from .nightingale import NIGHTINGALE
from .toolkit import TOOLKIT
from .upgrade_manager import UPGRADE_MANAGER
from .volcano import VOLCANO

COMPONENTS: tuple[ComponentDef, ...] = (
    NFD, DRIVER, TOOLKIT, DEVICE_PLUGIN, GCUSHARE_PLUGIN, EXPORTER, GFD, GCUSHARE_SCHEDULER, VOLCANO, NIGHTINGALE,
    UPGRADE_MANAGER,
)
BY_KEY: dict[str, ComponentDef] = {c.key: c for c in COMPONENTS}
