"""containerd's `enflame` runtime on one host: add it with a drop-in file, and put everything back exactly.

The same file runs inside the dynamic provider (local transport), inside the short-lived
activation pod and as the toolkit image's entrypoint, with `cri_client.py` (grpcio) next to
it. TOML: the standard library's `tomllib` reads (strict TOML 1.0, plain data, errors with
line numbers; Python >= 3.11), `tomlkit` writes the drop-in and edits config.toml keeping
the operator's comments and layout.

    python3 containerd_host.py activate --runtime-path P [--config-toml F] [--dropin D] [--address SOCK]
                                        [--restart-command CMD] [--mode restart|none] [--no-default]
                                        [--host-root /host] [--config-version 2|3|4] [--node N]
    python3 containerd_host.py restore  --state-json S [same path options]
    python3 containerd_host.py inspect  [--state-json S] [--runtime-path P] [same path options]

Each prints one JSON object as its last line of output (`{"error": ...}` and exit code 1
when the host was refused or left as it was).

What changes on the host:

* a drop-in file (default /etc/containerd/conf.d/99-enflame.toml) declaring the runtime
  handler `enflame` (runtime_type io.containerd.runc.v2, options.BinaryName = the enflame
  runtime) and, unless turned off, `default_runtime_name = "enflame"`;
* config.toml gets one `imports` entry naming the drop-in, unless it already imports it
  (exact path or glob); tomlkit's edit keeps every other line as it was, and it is re-read
  with tomllib and compared before it is written;
* containerd is restarted (configurable command) only when either file's bytes changed,
  then the *running* daemon is asked over CRI (runtime.v1 Status) whether it knows the runtime.

containerd merge semantics (checked with containerd 1.6.20's and 2.4.2's `config dump`): with config
`version = 2` (containerd 1.x), an imported file's plugin section *replaces* the whole
section loaded before it, so the drop-in carries the complete CRI plugin section in effect
before it (config.toml's, or an earlier import's) plus the runtime; a `runtimes` table
also replaces containerd's built-in one, so the built-in `runc` handler is spelled out
when no file declared runtimes. With `version = 3` (containerd 2.x) or `4` (2.2 and later, which
moved only the servers' settings) imports merge, and the drop-in holds only the runtime.
"""

from __future__ import annotations

import copy
import fnmatch
import glob as globmod
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from typing import Any, Optional

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Array, Table, Whitespace

try:
    from . import cri_client, hostfiles
except ImportError:  # run as a script (pod, toolkit image): cri_client.py and hostfiles.py sit next to this file
    import cri_client  # type: ignore[no-redef]
    import hostfiles  # type: ignore[no-redef]

b64, unb64 = hostfiles.b64, hostfiles.unb64

RUNTIME_NAME = "enflame"
RUNTIME_TYPE = "io.containerd.runc.v2"
# Config version -> the CRI plugin that holds the runtimes. 4 (containerd >= 2.2, `config default`) moved only the
# gRPC/ttrpc/metrics servers into plugins; the CRI keeps version 3's layout and merge semantics.
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime", 4: "io.containerd.cri.v1.runtime"}
# What a `runtimes` table replaces in containerd 1.x: the built-in handler (containerd 1.6/1.7 default config).
BUILTIN_RUNTIMES = {"runc": {"runtime_type": RUNTIME_TYPE}}
MODES = ("restart", "none")
BACKUP_SUFFIX = hostfiles.BACKUP_SUFFIX
DROPIN_HEADER = "# Written by gcu-stack: the enflame container runtime for Kubernetes (CRI). Removed by `pulumi destroy`.\n"


class ContainerdConfigError(hostfiles.Refused):
    """config.toml, an imported file or the drop-in path is unusable; nothing was written."""


# containerd did not take the runtime (or could not be restarted); the previous files were put back.
ActivationError = hostfiles.RolledBack


@dataclass
class ContainerdSettings:
    config_toml: str = "/etc/containerd/config.toml"
    dropin: str = "/etc/containerd/conf.d/99-enflame.toml"
    address: str = "/run/containerd/containerd.sock"
    restart_command: list[str] = field(default_factory=lambda: ["systemctl", "restart", "containerd"])
    set_default: bool = True  # gcu-operator made enflame the default runtime; keep that unless turned off
    host_root: str = ""  # "/host" in a pod that mounts the host's directories there; file contents keep host paths
    label: str = "localhost"  # how errors name this host (the node name)
    verify_seconds: float = 30.0
    config_version: Optional[int] = None  # for a missing config.toml: 2, 3 or 4; None asks the running containerd
    working_dir: str = "/"  # containerd's working directory: containerd 1.x resolves relative glob imports there


def host_directories(settings: ContainerdSettings) -> list[str]:
    """Host directories a container needs mounted (at /host<dir>): config.toml's, the drop-in's and the socket's."""
    wanted = sorted({os.path.dirname(p) or "/" for p in (settings.config_toml, settings.dropin, _socket_path(settings.address))})
    kept: list[str] = []
    for directory in wanted:  # a directory inside an already mounted one needs no mount of its own
        if not any(directory == k or directory.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(directory)
    return kept


def _socket_path(address: str) -> str:
    return address[len("unix://"):] if address.startswith("unix://") else address


# ----------------------------------------------------------------------------- parsing


def parse_toml(content: Optional[bytes], path: str, label: str) -> dict:
    """tomllib's reading of a file, or ContainerdConfigError naming the node, file and line."""
    if content is None:
        return {}
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content[: error.start].count(b"\n") + 1
        raise ContainerdConfigError(
            f"node {label}: {path} line {line}: not UTF-8 ({error.reason}); it was left untouched: fix it, then run `pulumi up` again"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        found = re.search(r"at line (\d+)", str(error))
        where = f" line {found.group(1)}" if found else ""
        raise ContainerdConfigError(
            f"node {label}: {path}{where}: not valid TOML ({error}); it was left untouched: fix or remove it, then run `pulumi up` again"
        ) from None


def config_version(data: dict, exists: bool, path: str, label: str) -> Optional[int]:
    """2, 3 or 4 from the file; None when the file is missing or empty (containerd's defaults apply)."""
    if not exists or not data:
        return None
    version = data.get("version")
    if version is None:
        raise ContainerdConfigError(
            f"node {label}: {path} has no `version`: containerd reads such a file as config version 1, which gcu-stack "
            "does not support; it was left untouched: add `version = 2` (containerd 1.6/1.7), `version = 3` "
            "(containerd 2.x) or `version = 4` (containerd 2.2 and later) with the matching plugin names, then run "
            "`pulumi up` again"
        )
    if version == 1:
        raise ContainerdConfigError(
            f"node {label}: {path} is containerd config version 1, which gcu-stack does not support; it was left "
            "untouched: migrate it (`containerd config migrate` on containerd 1.7+) to version 2, then run `pulumi up` again"
        )
    if version not in CRI_PLUGIN or isinstance(version, bool):
        raise ContainerdConfigError(
            f"node {label}: {path} has `version = {version!r}`; gcu-stack supports 2 (containerd 1.6/1.7), 3 (containerd "
            "2.x) and 4 (containerd 2.2 and later); it was left untouched"
        )
    return version


# ----------------------------------------------------------------------------- writing TOML (tomlkit)


def _same(a: Any, b: Any) -> bool:
    """Equal as TOML data (NaN equals NaN, and a bool is not an int)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _fill(container: Any, data: dict) -> None:
    """The keys of `data` (tomllib's data model) into a tomlkit document or table: values first, then tables."""
    for key, value in data.items():
        if not isinstance(value, dict) and not _is_table_array(value):
            container.add(key, tomlkit.item(value))
    for key, value in data.items():
        if isinstance(value, dict):
            container.add(key, _table(value))
        elif _is_table_array(value):
            tables = tomlkit.aot()
            for element in value:
                tables.append(_table(element))
            container.add(key, tables)


def _table(data: dict) -> Table:
    table = tomlkit.table(is_super_table=False)  # a header even when it holds only tables, as containerd writes it
    _fill(table, data)
    return table


def _lay_out(container: Any, depth: int) -> None:
    """Indent every table's header and keys by its depth, with a blank line before each header."""
    for key, item in container.body:
        if isinstance(item, (Table, AoT)):
            for table in item.body if isinstance(item, AoT) else [item]:
                table.trivia.indent = "\n" + "  " * depth
                _lay_out(table.value, depth + 1)
        elif key is not None:
            item.trivia.indent = "  " * depth


def dumps(document: dict) -> str:
    """TOML text for tomllib's data model laid out as `containerd config dump` writes it, checked by reading it back.

    The layout is set on every item rather than left to tomlkit's defaults, which changed between
    releases: tomlkit 0.11 to 0.15 write the same bytes, so the provider and the toolkit's pods
    (another tomlkit) agree on the drop-in instead of each rewriting it and restarting containerd."""
    container = tomlkit.document()
    _fill(container, document)
    _lay_out(container, 0)
    text = tomlkit.dumps(container).lstrip("\n")
    if not _same(tomllib.loads(text), document):
        raise ValueError("tomlkit does not round-trip this document")  # a bug here, never a host problem
    return text


# ----------------------------------------------------------------------------- editing config.toml (tomlkit)


class _EditError(Exception):
    pass


def _imports_of(text: str) -> tuple[tomlkit.TOMLDocument, Optional[Array]]:
    """config.toml as tomlkit reads it (every comment and space kept) and its top-level `imports` array."""
    try:
        document = tomlkit.parse(text)
    except (TOMLKitError, ValueError) as error:  # tomllib read it: a file tomlkit trips on is left to the operator
        raise _EditError(f"tomlkit cannot read it: {error}") from None
    imports = document.get("imports")
    if imports is not None and not isinstance(imports, Array):
        raise _EditError("imports is not an array")
    return document, imports


def add_import_text(text: str, entry: str, new_version: Optional[int] = None) -> str:
    """`text` with `entry` appended to the top-level `imports` array, or with `imports = [entry]` added
    after the last top-level key; everything else stays as it was written.

    new_version: also write `version = N` (for a file that has no settings at all)."""
    document, imports = _imports_of(text)
    if imports is not None:
        imports.append(entry)
        return document.as_string()
    newline = "\r\n" if "\r\n" in text else "\n"
    # tomlkit >= 0.13 also puts a blank line before a table that follows the new key: the file keeps its own spacing.
    indents = [(item, item.trivia.indent) for _, item in document.body if not isinstance(item, Whitespace)]
    for key, value in ((("version", new_version),) if new_version is not None else ()) + (("imports", [entry]),):
        item = tomlkit.item(value)
        item.trivia.trail = newline
        document[key] = item
    for item, indent in indents:
        item.trivia.indent = indent
    return document.as_string()


def remove_import_text(text: str, entry: str, drop_key: bool) -> tuple[str, bool]:
    """`text` without the last `imports` element equal to `entry` (and without the whole key when
    drop_key and it was the only element); second value: whether the key went."""
    document, imports = _imports_of(text)
    matches = [index for index, value in enumerate(imports or []) if value == entry]
    if imports is None or not matches:
        return text, False
    if drop_key and len(imports) == 1:
        del document["imports"]
        return document.as_string(), True
    del imports[matches[-1]]
    return document.as_string(), False


# ----------------------------------------------------------------------------- the host


class ContainerdHost:
    """File, restart and CRI operations on the machine this code runs on (files under settings.host_root)."""

    def __init__(self, settings: ContainerdSettings):
        self.settings = settings

    def at(self, host_path: str) -> str:
        """Where a host path is reachable from here."""
        root = self.settings.host_root.rstrip("/")
        return root + host_path if root else host_path

    @property
    def backup_path(self) -> str:
        return self.settings.config_toml + BACKUP_SUFFIX

    def read(self, host_path: str) -> Optional[bytes]:
        try:
            return hostfiles.read(self.at(host_path))
        except OSError as error:
            raise ContainerdConfigError(
                f"node {self.settings.label}: cannot read {host_path} ({error.strerror or error}); nothing was written"
            ) from None

    def write_atomic(self, host_path: str, content: bytes) -> None:
        # A new file (the drop-in, the backup record) may carry config.toml's settings, registry
        # credentials included: it gets config.toml's mode and owner.
        hostfiles.write_atomic(self.at(host_path), content, like=self.at(self.settings.config_toml))

    def put(self, host_path: str, content: Optional[bytes]) -> None:
        if content is None:
            self.remove(host_path)
        else:
            self.write_atomic(host_path, content)

    def remove(self, host_path: str) -> None:
        hostfiles.remove(self.at(host_path))

    def make_directories(self, host_directory: str) -> list[str]:
        """Create a directory and missing parents; returns the host paths created, outermost first."""
        missing = []
        current = os.path.normpath(host_directory)
        while not os.path.isdir(self.at(current)):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        created: list[str] = []
        try:
            for directory in reversed(missing):
                os.mkdir(self.at(directory), 0o755)
                created.append(directory)
        except OSError:
            self.remove_directories(created)
            raise
        return created

    def remove_directories(self, created: list[str]) -> None:
        """Remove directories this code created, innermost first, only while they are empty."""
        for directory in reversed(created):
            try:
                os.rmdir(self.at(directory))
            except OSError:
                return

    def glob(self, pattern: str) -> list[str]:
        root = self.settings.host_root.rstrip("/")
        matches = globmod.glob(self.at(pattern), include_hidden=True)
        return sorted(m[len(root):] if root else m for m in matches)

    def restart(self) -> None:
        try:
            subprocess.run(self.settings.restart_command, check=True, capture_output=True, timeout=300)
        except subprocess.CalledProcessError as error:
            tail = (error.stderr or b"").decode(errors="replace").strip()[-500:]
            raise RuntimeError(f"`{shlex.join(self.settings.restart_command)}` exited with {error.returncode}: {tail}") from None
        except (OSError, subprocess.TimeoutExpired) as error:
            raise RuntimeError(f"`{shlex.join(self.settings.restart_command)}` failed: {error}") from None

    def cri_runtimes(self) -> dict:
        """The running containerd's own word: {"default": ..., "runtimes": {...}}; raises cri_client.CriError."""
        return cri_client.runtimes(self.at(_socket_path(self.settings.address)), timeout=5.0)

    def daemon_version(self) -> str:
        return cri_client.version(self.at(_socket_path(self.settings.address)), timeout=5.0)["version"]

    def explain(self) -> Optional[str]:
        return cri_client.explain(self.at(_socket_path(self.settings.address)), timeout=5.0)


# ----------------------------------------------------------------------------- imports as containerd resolves them


def _glob_match(pattern: str, path: str) -> bool:
    """Go's filepath.Match per path element: `*` and `?` never cross a `/`; `[^...]` negates."""
    pattern_parts, path_parts = pattern.split("/"), path.split("/")
    if len(pattern_parts) != len(path_parts):
        return False
    return all(fnmatch.fnmatchcase(name, part.replace("[^", "[!")) for part, name in zip(pattern_parts, path_parts, strict=True))


def _resolve(host: ContainerdHost, entry: str, parent: str) -> list[str]:
    """Files one `imports` entry loads (containerd 1.6: globs as given, relative ones against the working
    directory; plain relative paths against the importing file's directory). Our drop-in counts as present."""
    dropin = os.path.normpath(host.settings.dropin)
    if "*" in entry:
        pattern = entry if os.path.isabs(entry) else os.path.join(host.settings.working_dir, entry)
        matches = set(host.glob(pattern))
        if _glob_match(os.path.normpath(pattern), dropin):
            matches.add(dropin)
        return sorted(matches)
    path = os.path.normpath(entry if os.path.isabs(entry) else os.path.join(os.path.dirname(parent), entry))
    return [path]


def _load_order(host: ContainerdHost, config_path: str, data: dict) -> list[tuple[str, dict]]:
    """Every file containerd loads, in its order (breadth first, each once), with its parsed content.

    Our drop-in appears with an empty content: what it holds is ours to decide."""
    dropin = os.path.normpath(host.settings.dropin)
    order: list[tuple[str, dict]] = []
    loaded: set[str] = set()
    pending: list[tuple[str, Optional[dict], str]] = [(os.path.normpath(config_path), data, "")]
    while pending:
        path, parsed, importer = pending.pop(0)
        if path in loaded:
            continue
        if parsed is None:
            if path == dropin:
                parsed = {}
            else:
                content = host.read(path)
                if content is None:
                    raise ContainerdConfigError(
                        f"node {host.settings.label}: {importer} imports {path}, which does not exist: containerd cannot "
                        "start with this configuration; nothing was written: fix the imports, then run `pulumi up` again"
                    )
                parsed = parse_toml(content, path, host.settings.label)
        loaded.add(path)
        order.append((path, parsed))
        imports = parsed.get("imports", [])
        if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
            raise ContainerdConfigError(f"node {host.settings.label}: {path}: `imports` must be an array of strings; nothing was written")
        for entry in imports:
            pending.extend((p, None, path) for p in _resolve(host, entry, path))
    return order


def _imports_dropin(host: ContainerdHost, data: dict) -> bool:
    """Whether config.toml with this content makes containerd load the drop-in."""
    dropin = os.path.normpath(host.settings.dropin)
    try:
        return any(path == dropin for path, _ in _load_order(host, host.settings.config_toml, data))
    except ContainerdConfigError:
        return host.settings.dropin in (data.get("imports") or [])


def _plugin_section(parsed: dict, plugin: str) -> Optional[dict]:
    section = (parsed.get("plugins") or {}).get(plugin)
    return section if isinstance(section, dict) else None


# ----------------------------------------------------------------------------- the plan


@dataclass
class ActivationPlan:
    version: int
    config: Optional[bytes]  # config.toml as it should be
    dropin: bytes  # the drop-in as it should be
    import_covered_before: bool  # config.toml (as it is now) already loads the drop-in
    cri_source: Optional[str]  # v2: the file whose CRI section the drop-in carries


def _default_version(host: ContainerdHost) -> int:
    if host.settings.config_version in CRI_PLUGIN:
        return int(host.settings.config_version)  # type: ignore[arg-type]
    try:
        found = host.daemon_version()
    except cri_client.CriError as error:
        raise ContainerdConfigError(
            f"node {host.settings.label}: {host.settings.config_toml} is missing or empty, so containerd runs on its "
            f"defaults, whose format depends on its version, and containerd at {host.settings.address} does not say "
            f"which ({error}); nothing was written: start containerd or set the config version (2 for containerd 1.x, 3 for 2.x)"
        ) from None
    major = re.match(r"v?(\d+)\.", found)
    return 3 if major and int(major.group(1)) >= 2 else 2


def plan(host: ContainerdHost, runtime_path: str, config: Optional[bytes]) -> ActivationPlan:
    """What config.toml and the drop-in must hold for `enflame`, from config.toml as it is now. Writes nothing."""
    s = host.settings
    data = parse_toml(config, s.config_toml, s.label)
    version = config_version(data, config is not None, s.config_toml, s.label)
    empty = version is None
    if version is None:
        version = _default_version(host)
    plugin = CRI_PLUGIN[version]
    disabled = data.get("disabled_plugins") or []
    if isinstance(disabled, list) and any(p in disabled for p in (plugin, "cri", CRI_PLUGIN[2])):
        raise ContainerdConfigError(
            f"node {s.label}: {s.config_toml} disables containerd's CRI plugin (disabled_plugins = {disabled!r}): this "
            "containerd does not serve Kubernetes, so there is no runtime to add; it was left untouched"
        )
    dropin_path = os.path.normpath(s.dropin)
    before = _load_order(host, s.config_toml, data)
    covered = any(path == dropin_path for path, _ in before)
    if config is None:
        desired_text = tomlkit.dumps({"version": version, "imports": [s.dropin]})
        expected = {"version": version, "imports": [s.dropin]}
    elif covered:
        desired_text, expected = config.decode("utf-8"), data
    else:
        try:
            desired_text = add_import_text(config.decode("utf-8"), s.dropin, version if empty else None)
        except _EditError as error:
            raise ContainerdConfigError(
                f"node {s.label}: could not add the import of {s.dropin} to {s.config_toml} by a minimal edit ({error}); "
                f"it was left untouched: add {s.dropin!r} to its top-level `imports` by hand, then run `pulumi up` again"
            ) from None
        expected = {**data, "imports": [*data.get("imports", []), s.dropin]}
        if empty:
            expected["version"] = version
    if config is None or not covered:
        try:
            reread = tomllib.loads(desired_text)
        except tomllib.TOMLDecodeError:
            reread = None
        if reread is None or not _same(reread, expected):
            raise ContainerdConfigError(
                f"node {s.label}: adding the import of {s.dropin} to {s.config_toml} would change more than that import; "
                f"it was left untouched: add {s.dropin!r} to its top-level `imports` by hand, then run `pulumi up` again"
            )
    desired_config = desired_text.encode("utf-8")
    order = _load_order(host, s.config_toml, tomllib.loads(desired_text))
    position = [path for path, _ in order].index(dropin_path)
    later = [path for path, parsed in order[position + 1:] if _overrides(_plugin_section(parsed, plugin), version, s.set_default)]
    if later:
        raise ContainerdConfigError(
            f"node {s.label}: {', '.join(later)} is loaded after {s.dropin} and sets containerd's CRI "
            + ("plugin section, which replaces the drop-in's on containerd 1.x" if version == 2 else "runtime settings the drop-in sets")
            + f", so the enflame runtime would be overridden; nothing was written: merge its CRI settings into "
            f"{s.config_toml} or load it before the drop-in"
        )
    runtime = {"runtime_type": RUNTIME_TYPE, "options": {"BinaryName": runtime_path}}
    cri_source = None
    if version == 2:
        # containerd 1.x: an imported plugin section replaces the one loaded before it, so carry that one whole.
        section: dict = {}
        for path, parsed in order[:position]:
            found = _plugin_section(parsed, plugin)
            if found is not None:
                section, cri_source = copy.deepcopy(found), path
        containerd = section.setdefault("containerd", {})
        if not isinstance(containerd.get("runtimes"), dict):
            containerd["runtimes"] = copy.deepcopy(BUILTIN_RUNTIMES)
        containerd["runtimes"][RUNTIME_NAME] = runtime
        if s.set_default:
            containerd["default_runtime_name"] = RUNTIME_NAME
        header = (
            DROPIN_HEADER
            + "# containerd 1.x replaces a plugin's whole section with an imported file's, so this file also carries\n"
            + f"# the CRI section of {cri_source or 'containerd defaults'}; gcu-stack rewrites it when that section changes.\n"
        )
    else:
        containerd = {"runtimes": {RUNTIME_NAME: runtime}}
        if s.set_default:
            containerd = {"default_runtime_name": RUNTIME_NAME, **containerd}
        section = {"containerd": containerd}
        header = DROPIN_HEADER
    dropin = (header + dumps({"version": version, "plugins": {plugin: section}})).encode("utf-8")
    return ActivationPlan(version, desired_config, dropin, covered, cri_source)


def _overrides(section: Optional[dict], version: int, set_default: bool) -> bool:
    """Whether a file loaded after the drop-in undoes it: on 1.x any CRI section replaces the drop-in's;
    on 2.x (sections merge) only the same keys do."""
    if section is None:
        return False
    if version == 2:
        return True
    containerd = section.get("containerd") or {}
    return RUNTIME_NAME in (containerd.get("runtimes") or {}) or (set_default and "default_runtime_name" in containerd)


def _carried_section(dropin: Optional[bytes], plugin: str) -> Optional[dict]:
    """The CRI section a v2 drop-in carries, without what gcu-stack adds."""
    try:
        parsed = tomllib.loads((dropin or b"").decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    section = copy.deepcopy(_plugin_section(parsed, plugin))
    if section is None:
        return None
    containerd = section.get("containerd") or {}
    (containerd.get("runtimes") or {}).pop(RUNTIME_NAME, None)
    containerd.pop("default_runtime_name", None)
    return section


# ----------------------------------------------------------------------------- verification


def _verdict(seen: dict, runtime_path: str, want_default: bool) -> Optional[str]:
    """None when containerd reports the runtime as wanted, else what is wrong."""
    handler = seen["runtimes"].get(RUNTIME_NAME)
    if handler is None:
        return f"containerd's CRI plugin does not know the runtime {RUNTIME_NAME!r} (it knows {sorted(seen['runtimes'])})"
    if handler.get("binaryName") != runtime_path:
        return f"containerd's {RUNTIME_NAME!r} runtime runs {handler.get('binaryName')!r}, not {runtime_path!r}"
    if want_default and seen["default"] != RUNTIME_NAME:
        return f"containerd's default runtime is {seen['default']!r}, not {RUNTIME_NAME!r}"
    return None


def _wait_verified(host: ContainerdHost, runtime_path: str) -> tuple[Optional[dict], Optional[str]]:
    """Poll the running containerd until it reports the runtime or verify_seconds pass: (last report, problem)."""
    deadline = time.monotonic() + host.settings.verify_seconds
    seen, problem = None, "containerd did not answer"
    while True:
        try:
            seen = host.cri_runtimes()
            problem = _verdict(seen, runtime_path, host.settings.set_default)
        except cri_client.CriError as error:
            seen, problem = None, f"containerd's CRI API did not answer ({error})"
        if problem is None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if seen is None and problem:
        reason = host.explain()
        if reason:
            problem += f"; {reason}"
    return seen, problem


def _wait_answer(host: ContainerdHost) -> tuple[Optional[dict], Optional[str]]:
    deadline = time.monotonic() + host.settings.verify_seconds
    while True:
        try:
            return host.cri_runtimes(), None
        except cri_client.CriError as error:
            if time.monotonic() > deadline:
                return None, str(error)
        time.sleep(0.1)


# ----------------------------------------------------------------------------- activate / restore / inspect


def _read_backup(host: ContainerdHost) -> Optional[dict]:
    """gcu-stack's on-host record: the original files, what was written and the directories created."""
    raw = host.read(host.backup_path)
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        return {
            "config": unb64(record["config"]),
            "dropin": unb64(record["dropin"]),
            "written": unb64(record.get("written")),
            "createdDirs": list(record.get("createdDirs") or []),
            "raw": raw,
        }
    except (ValueError, KeyError, TypeError):
        raise ContainerdConfigError(
            f"node {host.settings.label}: {host.backup_path} (gcu-stack's record of the original files) is unreadable; "
            "nothing was written: remove it only if config.toml and the drop-in are as they were before gcu-stack"
        ) from None


def _write_backup(host: ContainerdHost, config: Optional[bytes], dropin: Optional[bytes], written: Optional[bytes], created: list[str]) -> None:
    record = {"config": b64(config), "dropin": b64(dropin), "written": b64(written), "createdDirs": created}
    host.write_atomic(host.backup_path, json.dumps(record).encode())


def _put_files(host: ContainerdHost, config: Optional[bytes], dropin: Optional[bytes], adding: bool) -> None:
    """Write both files in the order that never leaves config.toml importing a missing drop-in."""
    s = host.settings
    if adding:
        host.put(s.dropin, dropin)
        host.put(s.config_toml, config)
    else:
        host.put(s.config_toml, config)
        host.put(s.dropin, dropin)


def activate(host: ContainerdHost, runtime_path: str, mode: str = "restart") -> dict:
    """Make `enflame` a containerd runtime (and its default unless settings say not); returns the state to undo it."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (containerd has no reload: 1.6 exits on SIGHUP)")
    s = host.settings
    current_config, current_dropin = host.read(s.config_toml), host.read(s.dropin)
    backup = _read_backup(host)
    wanted = plan(host, runtime_path, current_config)  # refuses broken input before anything is written
    if backup is not None:
        original_config, original_dropin, created = backup["config"], backup["dropin"], backup["createdDirs"]
    else:
        original_config, original_dropin, created = current_config, current_dropin, []
    original_data = parse_toml(original_config, s.config_toml, s.label)
    import_added = original_config is None or not _imports_dropin(host, original_data)
    reasons = []
    if current_dropin is None:
        reasons.append(f"drop-in {s.dropin} written")
    elif current_dropin != wanted.dropin:
        plugin = CRI_PLUGIN[wanted.version]
        carried, now = _carried_section(current_dropin, plugin), _carried_section(wanted.dropin, plugin)
        if wanted.version == 2 and carried is not None and not _same(carried, now):
            reasons.append(f"drop-in {s.dropin} rewritten: the CRI section of {wanted.cri_source or s.config_toml} changed since it was written")
        else:
            reasons.append(f"drop-in {s.dropin} rewritten: it differed from what gcu-stack writes")
    # What gcu-stack last wrote to config.toml: this run's edit, else the recorded one. An edit someone
    # made since then is theirs, so restore keeps it and removes only the import.
    if current_config != wanted.config:
        written_config = wanted.config
    elif backup is not None and backup["written"] is not None:
        written_config = backup["written"]
    else:
        written_config = current_config
    if current_config != wanted.config:
        reasons.append(f"{s.config_toml}: " + ("created, importing the drop-in" if current_config is None else "import of the drop-in added"))
    changed = bool(reasons)
    restarted = False
    previous_backup = backup["raw"] if backup else None
    new_dirs: list[str] = []
    if changed:
        try:
            new_dirs = host.make_directories(os.path.dirname(s.dropin) or "/")
            if current_config is None:
                new_dirs += host.make_directories(os.path.dirname(s.config_toml) or "/")
        except OSError as error:
            host.remove_directories(new_dirs)
            where = error.filename or os.path.dirname(s.dropin)
            raise ContainerdConfigError(
                f"node {s.label}: cannot create the directory {where} for {s.dropin} ({error.strerror or error}); nothing "
                "was written: choose another drop-in path or fix the directory, then run `pulumi up` again"
            ) from None
        try:
            created = created + new_dirs
            _write_backup(host, original_config, original_dropin, written_config, created)
            _put_files(host, wanted.config, wanted.dropin, adding=True)
        except OSError as error:
            _undo_files(host, current_config, current_dropin, previous_backup, new_dirs)
            raise ContainerdConfigError(f"node {s.label}: could not write {s.dropin} / {s.config_toml} ({error}); the previous files were put back") from None
        if mode == "restart":
            try:
                host.restart()
                restarted = True
            except RuntimeError as error:
                _roll_back(host, current_config, current_dropin, previous_backup, new_dirs)
                raise ActivationError(
                    f"node {s.label}: could not restart containerd: {error}; the previous {s.config_toml} and {s.dropin} were put back"
                ) from None
    seen, problem = None, None
    if mode == "restart":
        seen, problem = _wait_verified(host, runtime_path)
        if problem and changed:
            _roll_back(host, current_config, current_dropin, previous_backup, new_dirs)
            raise ActivationError(
                f"node {s.label}: after restarting containerd, {problem}; the previous {s.config_toml} and {s.dropin} "
                "were put back and containerd restarted"
            )
        if problem:
            # The files were already right, but the running containerd has not loaded them (e.g. an earlier
            # run stopped between writing and restarting): restarting is what makes them effective.
            reasons.append(f"containerd had not loaded the drop-in ({problem}): restarted")
            try:
                host.restart()
                restarted = True
            except RuntimeError as error:
                raise ActivationError(f"node {s.label}: could not restart containerd: {error}; {s.config_toml} and {s.dropin} are unchanged") from None
            seen, problem = _wait_verified(host, runtime_path)
            if problem:
                raise ActivationError(
                    f"node {s.label}: after restarting containerd, {problem}; {s.config_toml} and {s.dropin} were already "
                    "in place before this run and are left as they are: check containerd's log"
                )
    active = None if mode == "none" else problem is None
    if mode == "none":
        message = f"{s.dropin} written; containerd uses the enflame runtime only after its next restart" if changed else "unchanged"
    elif restarted:
        message = "containerd restarted; enflame is " + ("the default runtime" if s.set_default else "a known runtime")
    else:
        message = "unchanged; enflame is " + ("the default runtime" if s.set_default else "a known runtime")
    return {
        "runtime": "containerd",
        "version": wanted.version,
        "original": b64(original_config),
        "written": b64(written_config),
        "originalDropin": b64(original_dropin),
        "writtenDropin": b64(wanted.dropin),
        "importEntry": s.dropin,
        "importAdded": import_added,
        "importKeyAdded": import_added and "imports" not in original_data,
        "createdDirs": created,
        "runtimePath": runtime_path,
        "setDefault": s.set_default,
        "criSource": wanted.cri_source,
        "changed": changed,
        "restarted": restarted,
        "active": active,
        "defaultRuntime": seen["default"] if seen else None,
        "reasons": reasons,
        "message": message,
    }


def _undo_files(host: ContainerdHost, config: Optional[bytes], dropin: Optional[bytes], previous_backup: Optional[bytes],
                new_dirs: list[str]) -> None:
    """Both files, the backup record and the directories exactly as they were before this activation."""
    _put_files(host, config, dropin, adding=False)
    host.put(host.backup_path, previous_backup)
    host.remove_directories(new_dirs)


def _roll_back(host: ContainerdHost, config: Optional[bytes], dropin: Optional[bytes], previous_backup: Optional[bytes],
               new_dirs: list[str]) -> None:
    try:
        _undo_files(host, config, dropin, previous_backup, new_dirs)
    finally:
        try:
            host.restart()
            _wait_answer(host)
        except Exception:  # noqa: BLE001 - the activation error is the one to report
            pass


def restore(host: ContainerdHost, state: dict, mode: str = "restart") -> dict:
    """Put back what `activate` changed: config.toml's original bytes if nobody edited it since, else only
    our import entry removed; the drop-in as it was (normally: absent). Restarts only if something changed."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    s = host.settings
    backup = _read_backup(host)
    if not state and backup is None:
        return {"restored": False, "exact": True, "restarted": False, "message": "nothing recorded to restore"}
    if state:
        original, written = unb64(state.get("original")), unb64(state.get("written"))
        original_dropin = unb64(state.get("originalDropin"))
        import_added, key_added = bool(state.get("importAdded")), bool(state.get("importKeyAdded"))
        entry = state.get("importEntry") or s.dropin
        created = list(state.get("createdDirs") or [])
    elif backup is not None:  # only the on-host record (e.g. after the toolkit entrypoint's own activation)
        original, written, original_dropin, created = backup["config"], backup["written"], backup["dropin"], backup["createdDirs"]
        entry = s.dropin
        original_data = parse_toml(original, s.config_toml, s.label)
        import_added = original is None or not _imports_dropin(host, original_data)
        key_added = import_added and "imports" not in original_data
    current, current_dropin = host.read(s.config_toml), host.read(s.dropin)
    if current == written:
        target = original
    elif current is None or not import_added:
        target = current
    else:
        data = parse_toml(current, s.config_toml, s.label)  # someone edited it: refuse a broken file untouched
        try:
            text, key_gone = remove_import_text(current.decode("utf-8"), entry, drop_key=key_added)
        except _EditError as error:
            raise ContainerdConfigError(
                f"node {s.label}: could not remove the import of {entry} from {s.config_toml} by a minimal edit ({error}); "
                "it was left untouched: remove that entry by hand"
            ) from None
        imports = list(data.get("imports") or [])
        if entry in imports:
            del imports[len(imports) - 1 - imports[::-1].index(entry)]
        expected = {k: v for k, v in data.items() if k != "imports"}
        if not key_gone and "imports" in data:
            expected["imports"] = imports
        if not _same(tomllib.loads(text), expected):
            raise ContainerdConfigError(
                f"node {s.label}: removing the import of {entry} from {s.config_toml} would change more than that entry; "
                "it was left untouched: remove that entry by hand"
            )
        target = text.encode("utf-8")
    target_dropin = original_dropin
    changed = target != current or target_dropin != current_dropin
    restarted = False
    if changed:
        _put_files(host, target, target_dropin, adding=False)
    host.remove(host.backup_path)  # the files are back: the record has served
    host.remove_directories(created)
    if changed and mode == "restart":
        try:
            host.restart()
        except RuntimeError as error:
            raise ActivationError(
                f"node {s.label}: {s.config_toml} and {s.dropin} were restored, but containerd could not be restarted: {error}"
            ) from None
        restarted = True
        seen, problem = _wait_answer(host)
        if seen is None:
            raise ActivationError(
                f"node {s.label}: {s.config_toml} and {s.dropin} were restored and containerd restarted, but its CRI API "
                f"does not answer ({problem}): check containerd's log"
            )
    exact = target == original
    if target == current:
        said = f"{s.config_toml} " + ("was not changed by gcu-stack" if exact else "left as it is (edited since, without gcu-stack's import)")
    elif exact:
        said = f"{s.config_toml} restored byte for byte"
    else:
        said = f"{s.config_toml} was edited since: only the import of {entry} was removed"
    if target_dropin != current_dropin:
        said += f"; {s.dropin} " + ("removed" if target_dropin is None else "put back as it was")
    return {
        "restored": changed,
        "exact": exact,
        "restarted": restarted,
        "message": said if changed else "nothing to restore",
    }


def inspect(host: ContainerdHost, state: Optional[dict] = None, runtime_path: Optional[str] = None, mode: Optional[str] = None) -> dict:
    """For `pulumi refresh`: is our drop-in there and as written, does config.toml import it, does containerd report the runtime?"""
    s = host.settings
    state = state or {}
    runtime_path = runtime_path or state.get("runtimePath")
    config, dropin = host.read(s.config_toml), host.read(s.dropin)
    drift: list[str] = []
    written_dropin = unb64(state.get("writtenDropin"))
    if dropin is None:
        drift.append(f"{s.dropin} is missing")
    elif written_dropin is not None and dropin != written_dropin:
        drift.append(f"{s.dropin} differs from what gcu-stack wrote")
    import_present = None
    up_to_date = None
    try:
        data = parse_toml(config, s.config_toml, s.label)
        import_present = config is not None and any(
            p == os.path.normpath(s.dropin) for p, _ in _load_order(host, s.config_toml, data)
        )
        if not import_present:
            drift.append(f"{s.config_toml} no longer imports {s.dropin}")
        if runtime_path:
            wanted = plan(host, runtime_path, config)
            up_to_date = wanted.dropin == dropin and wanted.config == config
            if dropin is not None and wanted.dropin != dropin and wanted.version == 2:
                plugin = CRI_PLUGIN[2]
                if not _same(_carried_section(dropin, plugin), _carried_section(wanted.dropin, plugin)):
                    drift.append(f"the CRI section of {wanted.cri_source or s.config_toml} changed since {s.dropin} was written")
    except ContainerdConfigError as error:
        drift.append(str(error))
    known, default, problem = None, None, None
    try:
        seen = host.cri_runtimes()
        known = RUNTIME_NAME in seen["runtimes"]
        default = seen["default"]
        if runtime_path:
            problem = _verdict(seen, runtime_path, bool(state.get("setDefault", s.set_default)))
        elif not known:
            problem = f"containerd does not report the runtime {RUNTIME_NAME!r}"
    except cri_client.CriError as error:
        problem = f"containerd's CRI API does not answer ({error})"
    if problem:
        drift.append(problem)
    return {
        "config": b64(config),
        "dropin": b64(dropin),
        "dropinPresent": dropin is not None,
        "importPresent": import_present,
        "upToDate": up_to_date,
        "runtimeKnown": known,
        "defaultRuntime": default,
        "active": problem is None and known is True,
        "drift": drift,
    }


# ----------------------------------------------------------------------------- CLI


def _flag(value: str) -> bool:
    return value.strip().lower() not in ("0", "false", "no", "off", "")


def main(argv: Optional[list[str]] = None) -> int:
    defaults = ContainerdSettings()
    parser = hostfiles.cli(__doc__, "CONTAINERD", (
        ("--config-toml", "CONTAINERD_CONFIG", defaults.config_toml),
        ("--dropin", "CONTAINERD_DROPIN", defaults.dropin),
        ("--address", "CONTAINERD_ADDRESS", defaults.address),
        ("--host-root", "HOST_ROOT", ""),  # where the host's / is mounted (paths stay host paths)
    ))
    parser.add_argument("--mode", choices=MODES, default=os.environ.get("CONTAINERD_ACTIVATION", "restart"))
    parser.add_argument("--no-default", action="store_true", default=not _flag(os.environ.get("CONTAINERD_SET_DEFAULT", "true")),
                        help="add the runtime handler but leave containerd's default runtime as it is")
    parser.add_argument("--config-version", type=int, choices=sorted(CRI_PLUGIN), default=None,
                        help="for a missing config.toml")
    parser.add_argument("--working-dir", default="/", help="containerd's working directory (relative glob imports)")
    parser.add_argument("--verify-seconds", type=float, default=defaults.verify_seconds)
    args = parser.parse_args(argv)
    host = ContainerdHost(hostfiles.settings_from(args, ContainerdSettings, set_default=not args.no_default))
    return hostfiles.run(parser, args, sys.modules[__name__], host)


if __name__ == "__main__":
    sys.exit(main())
