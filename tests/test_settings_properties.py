"""Property: every `gcu-stack:*` setting the program accepts reaches what reads it as a value that program takes; every
one it refuses is refused before anything is declared, naming the setting.

Settings come from their own models (components/links.py `settings_models`, the steps' and components' pydantic
models): a random set of keys, each with a random set of its fields, drawn from plausible-but-unusual values and, a
few at a time, odd ones (a selector cut short, a relative path, a node name with '_', a zero timeout, an image with
a space). For an accepted set, what each bundled resource is handed (GcuNodes, ContainerRuntime, DriverUpgrade,
GcuValidation) and every declared object is checked by rules written a second time from the Kubernetes
documentation (tests/k8s_rules.py): label selectors, label keys and values, node names, image references, absolute
paths, positive durations, node ports in range.
"""

from __future__ import annotations

import json

import harness
import k8s_rules
import pulumi
from hypothesis import given
from hypothesis import strategies as st
from k8s_schema import validate_all

# ---------------------------------------------------------------------------- values, by what they are

SELECTORS = st.sampled_from([
    "", "app=trainer", "app in (trainer, infer)", "team!=ops,tier", "!canary", "gcu.example.com/job=yes", "a=",
    "app notin ()", "x > 3",
    # odd
    "app in (a,", "app=a=b", "bad key=x", "=x", "app in a", "a,", "/app=x", "app=" + "v" * 64, "x > y",
])
NODE_NAMES = st.lists(st.sampled_from(["gcu-node-1", "gcu-node-2.example.com", "n" * 253, "Node_1", "node 1", "-n", "n" * 254, ""]),
                      max_size=3)
LABEL_MAPS = st.dictionaries(st.sampled_from(["enflame.com/gcu.present", "team", "bad key", "a/b/c", "x" * 64, "example.com/gpu"]),
                             st.sampled_from(["true", "", "gcu", "v" * 64, "a b", "-x"]), max_size=2)
DRIVER_LABELS = st.sampled_from(["enflame.com/gcu.driver.present=true", "", "driver=ok", "no-equals", "bad key=x", "a=b c"])
PATHS = st.sampled_from(["/etc/docker/daemon.json", "/srv/gcu config/x.json", "/var/../etc/x", "relative/x", "", "/a\x00b", "/"])
SOCKETS = st.sampled_from(["unix:///var/run/docker.sock", "/run/containerd/containerd.sock", "tcp://127.0.0.1:2375", "", "unix://relative"])
COMMANDS = st.lists(st.sampled_from(["systemctl", "restart", "docker", "", "kill -HUP 1"]), max_size=3)
IMAGES = st.sampled_from(["registry.local/gcu/selfcheck:1", "busybox", "Reg.io/x:1", "x y", "a//b", "x@sha256:abc", ""])
DURATIONS = st.sampled_from([1, 30, 300, 3600, 0, -1, "60", 1.5])
COUNTS = st.sampled_from([1, 2, 10, 0, -3])
PERCENT_OR_COUNT = st.sampled_from(["25%", "1", "0", 3, "100%", "150%", "x", "-1"])
NAMESPACES = st.sampled_from(["gcu-validation", "kube-system", "Bad", "n" * 64, ""])
NODE_PORTS = st.sampled_from([30000, 30018, 32767, 32766, 8080, 40000, 0])
QUANTITIES = st.sampled_from(["10Gi", "500Mi", "1", "ten", "-1Gi", "1.5Ti"])
CLOCKS = st.sampled_from(["01:00", "00:00", "23:59", "24:00", "5:00", "25:00", "12:60", "noon", ""])
ZONES = st.sampled_from(["UTC", "Asia/Shanghai", "Europe/Berlin", "Asia/Shangai", "../etc/passwd", "", "CET"])
WINDOWS = st.lists(st.fixed_dictionaries({"start": CLOCKS, "end": CLOCKS}, optional={
    "days": st.lists(st.sampled_from(["Mon", "Sat", "Sun", "Saturday", "sat"]), max_size=3), "timeZone": ZONES}), max_size=2)

SETTINGS = {
    "gcuNodes": st.fixed_dictionaries({}, optional={
        "names": NODE_NAMES, "selector": LABEL_MAPS, "driverLabel": DRIVER_LABELS, "pageSize": COUNTS}),
    "driverUpgrade": st.fixed_dictionaries({}, optional={
        "maxParallel": COUNTS, "maxUnavailable": PERCENT_OR_COUNT,
        "waitForCompletion": st.fixed_dictionaries({}, optional={"selector": SELECTORS, "timeoutSeconds": DURATIONS}),
        "evictionTimeoutSeconds": DURATIONS, "drain": st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "timeoutSeconds": DURATIONS}),
        "driverReadyTimeoutSeconds": DURATIONS, "operandReadyTimeoutSeconds": DURATIONS,
        "windows": WINDOWS, "maxDurationMinutes": DURATIONS, "onFailure": st.sampled_from(["halt", "rollback", "Rollback", ""])}),
    "validation": st.fixed_dictionaries({}, optional={
        "enabled": st.booleans(), "mode": st.sampled_from(["fail", "warn", "loud"]), "timeoutSeconds": DURATIONS,
        "workload": st.booleans(), "sampleSize": COUNTS, "parallel": COUNTS, "workloadTimeoutSeconds": DURATIONS,
        "image": IMAGES, "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "sometimes"]), "command": COMMANDS,
        "runtimeClassName": st.sampled_from(["enflame", "runc", "Bad_Class", "", "r" * 254, "a.b"]), "namespace": NAMESPACES,
        "trigger": st.sampled_from(["", "2026-11-28", "x" * 300])}),
    "containerRuntime": st.sampled_from(["auto", "docker", "containerd", "crio"]),
    "dockerRuntime": st.fixed_dictionaries({}, optional={
        "transport": st.sampled_from(["pod", "local", "ssh"]), "runtimePath": PATHS, "timeoutSeconds": DURATIONS,
        "restartIn": st.sampled_from(["host", "container", "chroot"]), "mode": st.sampled_from(["reload", "restart", "none", "hup"]),
        "daemonJson": PATHS, "dockerHost": SOCKETS, "pidFile": PATHS, "restartCommand": COMMANDS, "verifySeconds": DURATIONS}),
    "containerd": st.fixed_dictionaries({}, optional={
        "transport": st.sampled_from(["pod", "local"]), "runtimePath": PATHS, "timeoutSeconds": DURATIONS,
        "restartIn": st.sampled_from(["host", "container"]), "mode": st.sampled_from(["restart", "none", "reload"]),
        "configToml": PATHS, "dropin": PATHS, "address": SOCKETS, "restartCommand": COMMANDS,
        "setDefaultRuntime": st.booleans(), "verifySeconds": DURATIONS, "configVersion": st.sampled_from([2, 3, 4, 1])}),
    "gcushareSchedulerNodePort": NODE_PORTS,
    "nightingaleWebNodePort": NODE_PORTS,
    "nightingaleStorage": QUANTITIES,
}


@st.composite
def stack_settings(draw) -> dict:
    keys = draw(st.lists(st.sampled_from(sorted(SETTINGS)), min_size=1, max_size=4, unique=True))
    return {key: draw(SETTINGS[key]) for key in keys}


# ---------------------------------------------------------------------------- where the values end up


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(value) -> bool:
    return _number(value) and value > 0


def _absolute(path) -> bool:
    return isinstance(path, str) and path.startswith("/") and "\x00" not in path


def _socket(address) -> bool:
    return isinstance(address, str) and _absolute(address.removeprefix("unix://"))


def _resource_problems(run: harness.Run) -> list[str]:
    """What the bundled resources were handed, held to the rules of what reads it."""
    problems = []
    for nodes in run.of_type("pulumi-python:dynamic/gcu:GcuNodes"):
        inputs = nodes.inputs
        problems += [f"gcuNodes.names: {n!r}" for n in inputs.get("names") or [] if not k8s_rules.dns_subdomain(n)]
        problems += [f"gcuNodes.selector: {k!r}={v!r}" for k, v in (inputs.get("selector") or {}).items()
                     if not (k8s_rules.label_key(k) and k8s_rules.label_value(v))]
        driver_label = inputs.get("driverLabel") or ""
        if driver_label:
            key, equals, value = driver_label.partition("=")
            if not (equals and k8s_rules.label_key(key) and k8s_rules.label_value(value)):
                problems.append(f"gcuNodes.driverLabel: {driver_label!r}")
        if not _positive(inputs.get("pageSize")):
            problems.append(f"gcuNodes.pageSize: {inputs.get('pageSize')!r}")
    for upgrade in run.of_type("pulumi-python:dynamic/gcu:DriverUpgrade"):
        inputs = upgrade.inputs
        wait = inputs.get("waitForCompletion") or {}
        if not k8s_rules.label_selector(wait.get("selector") or ""):
            problems.append(f"driverUpgrade.waitForCompletion.selector: {wait.get('selector')!r}")
        if not _positive(inputs.get("maxParallel")):
            problems.append(f"driverUpgrade.maxParallel: {inputs.get('maxParallel')!r}")
        unavailable = inputs.get("maxUnavailable")
        unavailable = str(int(unavailable)) if _number(unavailable) and float(unavailable).is_integer() else str(unavailable)
        if not (unavailable.isdigit() or (unavailable.endswith("%") and unavailable[:-1].isdigit() and int(unavailable[:-1]) <= 100)):
            problems.append(f"driverUpgrade.maxUnavailable: {unavailable!r}")
        durations = [inputs.get("evictionTimeoutSeconds"), inputs.get("driverReadyTimeoutSeconds"),
                     inputs.get("operandReadyTimeoutSeconds"), (inputs.get("drain") or {}).get("timeoutSeconds")]
        problems += [f"driverUpgrade: a timeout of {d!r}" for d in durations if not _positive(d)]
        # (0: no limit. The engine's mocks hand numbers on as floats.)
        if not (_number(wait.get("timeoutSeconds")) and wait["timeoutSeconds"] >= 0 and float(wait["timeoutSeconds"]).is_integer()):
            problems.append(f"driverUpgrade.waitForCompletion.timeoutSeconds: {wait.get('timeoutSeconds')!r}")
        problems += [f"driverUpgrade.windows: {w!r}" for w in inputs.get("windows") or [] if not k8s_rules.maintenance_window(w)]
        minutes = inputs.get("maxDurationMinutes")
        if minutes is not None and not (_positive(minutes) and float(minutes).is_integer()):
            problems.append(f"driverUpgrade.maxDurationMinutes: {minutes!r}")
        rollback = inputs.get("rollback")   # a node rolled back is held by this label: a label key the API server takes
        if rollback is not None and not (rollback.get("holdLabel") and k8s_rules.label_key(rollback["holdLabel"])):
            problems.append(f"driverUpgrade.rollback: {rollback!r}")
    for validation in run.of_type("pulumi-python:dynamic/gcu:GcuValidation"):
        inputs = validation.inputs
        if inputs.get("image") is not None and not k8s_rules.image_reference(inputs["image"]):
            problems.append(f"validation.image: {inputs['image']!r}")
        if not k8s_rules.dns_label(inputs.get("namespace") or ""):
            problems.append(f"validation.namespace: {inputs.get('namespace')!r}")
        # ("": no runtime class is set on the pods, as documented)
        if inputs.get("runtimeClassName") and not k8s_rules.dns_subdomain(inputs["runtimeClassName"]):
            problems.append(f"validation.runtimeClassName: {inputs.get('runtimeClassName')!r}")
        if not inputs.get("command") or not all(inputs["command"]):
            problems.append(f"validation.command: {inputs.get('command')!r}")
        for name in ("timeoutSeconds", "workloadTimeoutSeconds", "parallel"):
            if not _positive(inputs.get(name)):
                problems.append(f"validation.{name}: {inputs.get(name)!r}")
    for runtime in run.of_type("pulumi-python:dynamic/gcu:ContainerRuntime"):
        inputs = runtime.inputs
        for backend, options in (("dockerRuntime", inputs.get("docker") or {}), ("containerd", inputs.get("containerd") or {})):
            for name in ("runtimePath", "daemonJson", "pidFile", "configToml", "dropin"):
                if name in options and not _absolute(options[name]):
                    problems.append(f"{backend}.{name}: {options[name]!r}")
            for name in ("dockerHost", "address"):
                if name in options and not _socket(options[name]):
                    problems.append(f"{backend}.{name}: {options[name]!r}")
            if "restartCommand" in options and (not options["restartCommand"] or not all(options["restartCommand"])):
                problems.append(f"{backend}.restartCommand: {options['restartCommand']!r}")
            for name in ("timeoutSeconds", "verifySeconds"):
                if name in options and not _positive(options[name]):
                    problems.append(f"{backend}.{name}: {options[name]!r}")
    for service in run.k8s():
        for port in (service.inputs.get("spec") or {}).get("ports") or [] if service.inputs.get("kind") == "Service" else []:
            if "nodePort" in port and not 30000 <= port["nodePort"] <= 32767:
                problems.append(f"node port {port['nodePort']}")
    return problems


def check(settings: dict) -> str:
    spec = harness.full_spec(**{"driver.notDeploy": False})
    config = {"spec": spec, "nightingaleDbPassword": harness.PASSWORD,
              **{key: json.dumps(value) if not isinstance(value, str) else value for key, value in settings.items()}}
    try:
        run = harness.run_program(config, secret_keys=("nightingaleDbPassword",))
    except pulumi.RunError as error:
        message = str(error)
        assert [r.type for r in error.registrations] == ["pulumi:pulumi:Stack"], "declared something before refusing"
        problems = [line[4:] for line in message.splitlines() if line.startswith("  - ")] or [message]
        for problem in problems:
            assert any(f"gcu-stack:{key}" in problem for key in settings), f"names no setting it was given: {problem}"
        return "refused"
    broken = _resource_problems(run)
    assert broken == [], "accepted, but what reads it would refuse:\n" + "\n".join(broken) + "\n" + json.dumps(settings, indent=1)
    validate_all(run)
    releases = [r.inputs["name"] for r in run.registrations if r.type == "kubernetes:helm.sh/v3:Release"]
    assert k8s_rules.violations([r.manifest for r in run.k8s()], releases) == []
    return "accepted"


OUTCOMES: dict[str, int] = {}


@given(stack_settings())
def test_settings_deploy_or_are_refused_naming_the_setting(settings):
    outcome = check(settings)
    OUTCOMES[outcome] = OUTCOMES.get(outcome, 0) + 1


def test_the_generator_reaches_both_outcomes():
    if not OUTCOMES:
        test_settings_deploy_or_are_refused_naming_the_setting()
    assert OUTCOMES.get("accepted", 0) >= 5 and OUTCOMES.get("refused", 0) >= 5, OUTCOMES
