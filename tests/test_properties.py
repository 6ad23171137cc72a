"""Property: every blueprint the program accepts declares only objects that deploy; every one it refuses
names a field and declares nothing.

Blueprints come from two generators: one walks the spec model (every component, every field of
BaseFields and of the component's own model, sub-parts included) and draws odd but plausible values
for each; the other mutates the seed blueprint a few fields at a time. For an accepted blueprint,
every declared object validates against the Kubernetes 1.33 OpenAPI schema (tests/k8s_schema.py)
and against the rules that schema cannot express, implemented a second time from the Kubernetes
documentation (tests/k8s_rules.py); the blueprint also validates against the shipped JSON Schema.

Profiles (HYPOTHESIS_PROFILE, registered in tests/conftest.py for every property test): `dev` (default, random, 50
examples per property), `ci` (the default when CI is set: derandomised, no deadline, same count) and `thorough` (600
examples, for hunting). None keeps an example database in the checkout.
"""

from __future__ import annotations

import functools
import json
import typing

import harness
import jsonschema
import k8s_rules
import kubernetes_validate.utils
import pulumi
from hypothesis import given
from hypothesis import strategies as st
from k8s_schema import validate_all
from pydantic import BaseModel

from components.blueprint import GcuResourceSpec
from components.catalog import BY_KEY
from components.schema import SCHEMA_FILE
from components.spec import BaseFields

# (Hypothesis profiles: tests/conftest.py.)

# kubernetes-validate reads a schema file per object validated: read each once (read-only use).
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)

SCHEMA = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
DIGEST_HEX = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
FIELD_PREFIXES = ("spec.", "gcu-stack:", "metadata.", "apiVersion", "kind")


# ---------------------------------------------------------------------------- values


def _sized(alphabet: str, sizes: st.SearchStrategy[int]) -> st.SearchStrategy[str]:
    return sizes.flatmap(lambda n: st.text(alphabet=alphabet, min_size=n, max_size=n))


# Two kinds of values per field: UNUSUAL ones pass the field's own rules but stress where the value
# ends up (dots in names, long names, digests, odd registries, env names the stack sets itself);
# ODD ones may be invalid outright (upper case, '..', bad digests, relative paths).
NAME_SIZES = st.one_of(st.integers(1, 20), st.sampled_from([45, 46, 53, 54, 62, 63, 64, 100, 240, 243, 246, 247, 253]))
SUBDOMAIN_NAMES = _sized("abz09-.", NAME_SIZES).filter(lambda s: k8s_rules.dns_subdomain(s))
PLAIN_NAMES = st.builds(lambda a, b: f"{a}-{b}", st.sampled_from(["gcu", "enflame", "n9e"]), _sized("abc019-", st.integers(1, 12))).filter(
    lambda s: s[-1] != "-"
)
COMMON_NAMES = st.sampled_from(
    ["enflame-gcu-exporter", "gcu-agent", "mysql", "redis", "nfd-clusterrole", "gcushare-scheduler-extender", "a", "x.y", "web-ui", "volcano"]
)
DIGEST = DIGEST_HEX.map(lambda h: f"sha256:{h}")
ENV_VALUES = st.one_of(st.text(max_size=5), st.integers(), st.booleans())
UNUSUAL: dict[str, st.SearchStrategy] = {
    "notDeploy": st.booleans(),
    "image": st.one_of(
        st.sampled_from(["gcu-exporter", "team/gcu-exporter", "gcu__x", "a/b/c", "gcu.x", "gcu---x"]),
        st.builds(lambda name, hex_: f"{name}@sha256:{hex_}", st.sampled_from(["gcu-exporter", "node-feature-discovery"]), DIGEST_HEX),
    ),
    "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
    "name": st.one_of(COMMON_NAMES, PLAIN_NAMES, SUBDOMAIN_NAMES),
    "namespace": st.one_of(st.sampled_from(["kube-system", "enflame", "gcu", "default", "gcu-share", "volcano-system"]), _sized("az09", st.sampled_from([1, 63]))),
    "repository": st.sampled_from([
        harness.ENFLAME_REPO, harness.GCU_REPO, "localhost:5000/gcu", "registry.example.com:443/a__b", "Registry.Example.com/gcu",
        "[fd00::1]:5000/gcu", "gcu_team", "10.0.0.1:5000/x/y", "r.io/" + "p" * 240,
    ]),
    "version": st.one_of(st.sampled_from(["latest", "2.1.0", "v0.11.3", "default", "1.0-rc1", "A_b.c-d", "a" * 128]), DIGEST),
    "env": st.lists(
        st.fixed_dictionaries({"name": st.sampled_from(["A", "B", "WITH_REBOOT", "NODE_NAME", "MYSQL_HOST", "MEMORY_UNIT", "my.var", "_"]), "value": ENV_VALUES}),
        max_size=3, unique_by=lambda e: e["name"],
    ),
    "nodeSelector": st.sampled_from([{"enflame.com/gcu.present": "true"}, {"team": "gcu"}, {}]),
    "memoryUnit": st.sampled_from(["1", "0.1", "0.01", "0.001", 1, 0.1]),
    "gcushareNodes": st.lists(st.one_of(st.sampled_from(["gcu-node-1", "gcu-node-2.example.com"]), _sized("az09-.", st.sampled_from([10, 63, 64, 70])).filter(k8s_rules.dns_subdomain)), max_size=2),
    "mysql-pv": st.fixed_dictionaries({}, optional={"name": st.one_of(COMMON_NAMES, SUBDOMAIN_NAMES), "hostpath": st.sampled_from(["/var/lib/mysql", "/data//mysql/", "/srv/gcu data", "/var/lib/./x", "/x/..y", "/var/../etc", "/.."])}),
    "mysql-pvc": st.fixed_dictionaries({}, optional={"name": st.one_of(COMMON_NAMES, SUBDOMAIN_NAMES)}),
}
# Driver pools: distinct names; selectors that overlap (refused) or not; image fields of their own or not.
UNUSUAL["pools"] = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b", "t20", "canary-1"]),
         "nodeSelector": st.sampled_from([{"pool": "a"}, {"pool": "b"}, {"zone": "z1"}, {"pool": "c", "zone": "z2"}])},
        optional={k: UNUSUAL[k] for k in ("version", "image", "repository")},
    ),
    max_size=2, unique_by=lambda p: p["name"],
)
ODD: dict[str, st.SearchStrategy] = {
    "image": st.one_of(st.sampled_from(["gcu..exporter", "gcu___x", "gcu-exporter:1.0", "Gcu", "gcu.-x", "/x", "x@sha256:abc"]), _sized("az09._-/@:", st.integers(1, 30))),
    "imagePullPolicy": st.sampled_from(["Sometimes", "always", ""]),
    "name": st.one_of(_sized("abz09-.A_", st.integers(0, 8)), st.just("x" * 254)),
    "namespace": _sized("az09-.", st.integers(0, 64)),
    "repository": st.one_of(
        st.sampled_from(["reg..example.com/x", "registry.example.com/a..b", "https://registry", "a//b", "-reg.io/x", "reg.io/", "REG_X/y"]),
        _sized("az09._-/:", st.integers(1, 40)),
    ),
    "version": st.one_of(
        st.sampled_from([".hidden", "-x", "a" * 129, "sha256:abc", "md5:" + "a" * 32, "v1:2"]),
        DIGEST_HEX.map(lambda h: f"sha256:{h.upper()}"),
        st.text(alphabet="0123456789abcdef", min_size=96, max_size=96).map(lambda h: f"sha384:{h}"),
    ),
    "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["A", "A", "1X", "..x", "RUNTIME_ACTIVATION", "MYSQL_PASSWORD"]), "value": ENV_VALUES}), max_size=3),
    "nodeSelector": st.sampled_from([{"bad key!": "x"}, {"a": "v" * 64}]),
    "memoryUnit": st.sampled_from(["0.5", 2, "x"]),
    "gcushareNodes": st.one_of(st.just("gcu-node-1"), st.lists(_sized("az09-.", st.integers(0, 70)), min_size=1, max_size=2)),
    "mysql-pv": st.sampled_from([{"hostpath": "relative/dir"}, {"name": "Mysql"}, {"size": 1}]),
    "mysql-pvc": st.sampled_from([{"name": "-x"}, {"claim": "x"}]),
    "notDeploy": st.sampled_from(["perhaps", 2]),
    "pools": st.sampled_from([
        [{"name": "Pool_A", "nodeSelector": {"pool": "a"}}], [{"name": "a"}], [{"name": "a", "nodeSelector": {}}], "a",
        [{"name": "a", "nodeSelector": {"pool": "a"}, "env": []}], [{"name": "a", "nodeSelector": {"pool": "a"}, "version": "-x"}],
    ]),
}


def _model(annotation) -> type[BaseModel] | None:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def fields_of(model: type[BaseModel], values: dict[str, st.SearchStrategy], depth: int = 0) -> dict[str, st.SearchStrategy]:
    """A strategy per field of a spec model, by alias: BaseFields values, the component's own, sub-parts recursively."""
    found = {}
    for name, info in model.model_fields.items():
        alias = info.alias or name
        sub = _model(info.annotation)
        if sub is not None and issubclass(sub, BaseFields) and depth == 0:
            found[alias] = st.fixed_dictionaries({}, optional=fields_of(sub, values, depth + 1))
        elif alias in values:
            found[alias] = values[alias]
        else:
            raise AssertionError(f"no strategy for spec field {model.__name__}.{alias}: add one")
    return found


def spec_model(key: str) -> type[BaseModel]:
    return _model(GcuResourceSpec.model_fields[key].annotation)


def field_paths(key: str) -> list[list[str]]:
    """Every field of a component's model as a path (sub-parts' fields included)."""
    paths = []
    for name, info in spec_model(key).model_fields.items():
        alias = info.alias or name
        sub = _model(info.annotation)
        if sub is not None and issubclass(sub, BaseFields):
            paths += [[alias, s.alias or n] for n, s in sub.model_fields.items()]
        else:
            paths.append([alias])
    return paths


def _set(spec: dict, path: list[str], value) -> None:
    node = spec
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            return
    node[path[-1]] = value


@st.composite
def odd_fields(draw, spec: dict, count: int) -> dict:
    """`spec` with `count` fields of random components set to odd values."""
    for _ in range(count):
        key = draw(st.sampled_from(sorted(BY_KEY)))
        path = draw(st.sampled_from(field_paths(key)))
        if path[-1] in ODD:
            spec.setdefault(key, {})
            _set(spec, [key, *path], draw(ODD[path[-1]]))
    return spec


# ---------------------------------------------------------------------------- blueprints


@st.composite
def from_the_model(draw) -> dict:
    """A spec with a random set of components, each with random fields (unusual values), and at most two odd ones."""
    spec = {}
    for key in BY_KEY:
        if draw(st.integers(0, 2)):  # two in three present
            spec[key] = draw(st.fixed_dictionaries({}, optional=fields_of(spec_model(key), UNUSUAL)))
    if "devicePlugin" in spec and "gcusharePlugin" in spec and draw(st.integers(0, 4)):
        spec["gcusharePlugin"]["notDeploy"] = True  # usually keep the pair exclusive, sometimes not
    return draw(odd_fields(spec, draw(st.sampled_from([0, 0, 1, 2]))))


@st.composite
def seed_mutations(draw) -> dict:
    """The seed with every component switched on or off at random and one to four fields changed."""
    spec = json.loads(json.dumps(harness.SEED["spec"]))
    for key in spec:
        spec[key]["notDeploy"] = draw(st.booleans())
    if not spec["devicePlugin"]["notDeploy"] and not spec["gcusharePlugin"]["notDeploy"] and draw(st.integers(0, 3)):
        spec[draw(st.sampled_from(["devicePlugin", "gcusharePlugin"]))]["notDeploy"] = True
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(sorted(BY_KEY)))
        path = draw(st.sampled_from(field_paths(key)))
        values = UNUSUAL if draw(st.integers(0, 3)) else ODD
        if path[-1] in values:
            _set(spec, [key, *path], draw(values[path[-1]]))
    return spec


# ---------------------------------------------------------------------------- the property


def check(spec: dict, name: str = "enflame-gcu-resource") -> str:
    config = {"spec": spec, "name": name, "nightingaleDbPassword": harness.PASSWORD}
    try:
        run = harness.run_program(config, secret_keys=("nightingaleDbPassword",))
    except pulumi.RunError as error:
        message = str(error)
        assert [r.type for r in error.registrations] == ["pulumi:pulumi:Stack"], "declared something before refusing"
        problems = [line[4:] for line in message.splitlines() if line.startswith("  - ")]
        assert problems, message
        for problem in problems:
            assert problem.startswith(FIELD_PREFIXES) or problem.startswith("`plugin`"), f"names no field: {problem}"
        return "refused"
    validate_all(run)
    releases = [r.inputs["name"] for r in run.registrations if r.type == "kubernetes:helm.sh/v3:Release"]
    broken = k8s_rules.violations([r.manifest for r in run.k8s()], releases)
    assert broken == [], "accepted, but would not deploy:\n" + "\n".join(broken) + "\n" + json.dumps(spec, indent=1)[:3000]
    SCHEMA.validate({"apiVersion": "topsops.enflame.com/v1", "kind": "GcuResource", "metadata": {"name": name}, "spec": spec})
    return "accepted"


OUTCOMES: dict[str, dict[str, int]] = {}


def tally(property_name: str, outcome: str) -> None:
    counts = OUTCOMES.setdefault(property_name, {})
    counts[outcome] = counts.get(outcome, 0) + 1


@given(from_the_model())
def test_blueprints_from_the_spec_model_deploy_or_are_refused_by_field(spec):
    tally("model", check(spec))


@given(seed_mutations(), st.one_of(st.just("enflame-gcu-resource"), _sized("az09-.", st.sampled_from([63, 64, 200, 253]))).filter(
    lambda n: k8s_rules.dns_subdomain(n)))
def test_mutations_of_the_seed_deploy_or_are_refused_by_field(spec, name):
    tally("seed", check(spec, name))


def test_the_generators_reach_both_outcomes():
    # Each property must have produced accepted and refused blueprints, or it tested one side only.
    # (Run after the two properties, in file order; run alone, it runs them first.)
    properties = {"model": test_blueprints_from_the_spec_model_deploy_or_are_refused_by_field, "seed": test_mutations_of_the_seed_deploy_or_are_refused_by_field}
    for name, prop in properties.items():
        if name not in OUTCOMES:
            prop()
        counts = OUTCOMES.get(name, {})
        assert counts.get("accepted", 0) >= 5 and counts.get("refused", 0) >= 5, (name, counts)
