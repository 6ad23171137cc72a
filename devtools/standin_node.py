"""What a real test node needs to run the seed blueprint's containers without Enflame's packages or a registry.

`build_images` builds every image the seed runs from images/ (the toolkit's runtime is runc under the
enflame name, so pods keep starting once it is the default; the device plugin is the stand-in plugin of
devtools/fakegcu, which the GCU-share plugin's image runs too; the GCU-share extender is devtools/fakeextender;
exporter and GFD are stand-in programs; the driver's installer is devtools/standin_driver.py's, one image per
version; NFD is the real one (images/nfd, from kube.sh's build of devtools/nfd); Nightingale's six parts
are devtools/fakenightingale), tagged
`REPOSITORY/<image>:TAG`. `blueprint` is the seed blueprint pointed at them (imagePullPolicy Never; `--gcushare`:
GCU-share instead of the device plugin),
and `containerd_settings` the `gcu-stack:containerd` a devtools.realnode node needs (no systemd there: stopping
containerd from the pod restarts it under the node's restart loop).

CLI (for scripts/gcu-stack --real-nodes)::

    python -m devtools.standin_node build --docker-state-dir DIR --workdir DIR   # prints the refs, one a line
    python -m devtools.standin_node blueprint [--gcushare] [--nightingale] [--nightingale-node NODE]
                                              [--nightingale-volume PATH] [--driver VERSION] > gr.json
    python -m devtools.standin_node containerd                                  # the gcu-stack:containerd value
    python -m devtools.standin_node policy-config                               # the pack's config for the stack
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

from devtools import NFD_MODULE, ToolchainMissing, built_module, fakeextender, fakegcu, fakenightingale, gobuild, imagebuild, standin_driver
from devtools.realnode import REAL_NODE_LABEL, RealNode
from devtools.rootfs import import_base_image, rootfs_tarball

NFD_DOCKERFILE = Path(__file__).resolve().parent.parent / "images" / "nfd" / "Dockerfile"
REGISTRY_NAME = "gcu-e2e.local"   # no such host: nodes import these images, or pull them from a local registry
REPOSITORY = f"{REGISTRY_NAME}/gcu"
TAG = "e2e"
KEYS = ("toolkit", "devicePlugin", "exporter", "gfd", "gcusharePlugin", "gcushareScheduler")
GCUSHARE_KEYS = ("gcusharePlugin", "gcushareScheduler")   # the seed leaves them out (notDeploy)
NFD_VERSION = f"v{built_module(*NFD_MODULE)[0]}"
NFD_IMAGE = f"{REPOSITORY}/node-feature-discovery:{NFD_VERSION}"   # the real NFD (images/nfd)


def _toolkit_package(path: Path) -> None:
    runtime = f"#!/bin/sh\nexec {shutil.which('runc') or '/usr/sbin/runc'} \"$@\"\n".encode()
    imagebuild.tar_gz(path, {"toolkit/bin/enflame-container-runtime": runtime})


DRIVER_VERSIONS = ("1.0", "2.0")   # the stand-in driver images `build` makes: one to install, one to upgrade to


def image_ref(key: str) -> str:
    """The reference `build_images` tags component `key`'s image with."""
    from components.catalog import BY_KEY

    return f"{REPOSITORY}/{BY_KEY[key].default_image}:{TAG}"


def build_images(dockerd: Any, workdir: Path, driver_versions: tuple[str, ...] = (), *,
                 upgrade_manager: bool = False) -> list[str]:
    """Build every image the seed runs into `dockerd`, and the driver's (images/driver, around the stand-in installer
    of devtools/standin_driver.py) of each of `driver_versions`, tagged with the version; returns their references.
    With `upgrade_manager`, gcu-upgrade-manager's too (images/upgrade-manager, around this checkout's package)."""
    base = import_base_image(dockerd, rootfs_tarball(), imagebuild.BASE_IMAGE)
    packages = workdir / "packages"
    imagebuild.write_standins(packages, keys=("exporter", "gfd"), padded=False)
    _toolkit_package(packages / imagebuild.standin_name("toolkit"))
    fakegcu.write_package(packages / imagebuild.standin_name("devicePlugin"))
    gobuild.write_package(packages / imagebuild.standin_name("gcusharePlugin"), fakegcu.binary(),
                          fakegcu.GCUSHARE_BINARY_NAME)
    fakeextender.write_package(packages / imagebuild.standin_name("gcushareScheduler"))
    entry = {"build": True, "baseImage": base, "repository": REPOSITORY, "tag": TAG}
    refs = list(imagebuild.build_project_images(dockerd, workdir, packages, {key: entry for key in KEYS}).values())
    binaries = built_module(*NFD_MODULE)[1]
    missing = [b for b in ("nfd-master", "nfd-worker") if not (binaries / b).is_file()]
    if missing:
        raise ToolchainMissing(f"{', '.join(missing)} missing in {binaries}: run scripts/toolchain.sh kube "
                               f"(it builds NFD {NFD_VERSION} from devtools/nfd)")
    dockerd.docker("build", "-t", NFD_IMAGE, "--build-arg", f"BASE_IMAGE={base}", "-f", str(NFD_DOCKERFILE), str(binaries))
    nightingale = fakenightingale.build_images(dockerd, workdir, base, REPOSITORY, TAG)
    drivers = []
    for version in driver_versions:
        driver_packages = workdir / "driver-packages" / version
        standin_driver.write_package(driver_packages, version)
        drivers.append(imagebuild.build_project_images(dockerd, workdir, driver_packages, {"driver": {
            "build": True, "baseImage": base, "repository": REPOSITORY, "tag": version}})["driver"])
    if upgrade_manager:
        from service import package

        manager_packages = workdir / "upgrade-manager-packages"
        package.package(manager_packages)
        drivers.append(imagebuild.build_project_images(dockerd, workdir, manager_packages, {"upgradeManager": {
            "build": True, "baseImage": base, "repository": REPOSITORY, "tag": TAG}})["upgradeManager"])
    return [*refs, NFD_IMAGE, *nightingale, *drivers]


def driver_image(version: str) -> str:
    """The reference of the stand-in driver image `build_images` makes for `version`."""
    return f"{REPOSITORY}/gcu-driver:{version}"


def blueprint(gcushare: bool = False, nightingale: bool = False, nightingale_node: Optional[str] = None,
              nightingale_volume: Optional[str] = None, driver: Optional[str] = None,
              upgrade_manager_node: Optional[str] = None) -> dict:
    """The seed blueprint, running the stand-in images; with `gcushare`, GCU-share instead of the device plugin
    (as the seed tells operators: the two cannot run side by side); with `nightingale`, Nightingale deployed (the
    seed leaves it out). `nightingale_node` pins Nightingale to one node and `nightingale_volume` puts its database's
    volume at that path there: a hostPath volume is one node's directory. With `driver` (a version `build_images`
    made), the driver deployed too (the seed leaves it out), installing the stand-in driver. With
    `upgrade_manager_node`, gcu-upgrade-manager deployed on that node (`build_images(upgrade_manager=True)`)."""
    seed = json.loads((Path(__file__).resolve().parent.parent / "blueprints" / "gcu-resource.json").read_text())
    pinned = {"repository": REPOSITORY, "version": TAG, "imagePullPolicy": "Never"}
    spec = seed["spec"]
    # The real NFD, in its NodeFeature layout; its master on a real node (a simulated one would run nothing).
    nfd = {**pinned, "version": NFD_VERSION}
    spec["nfd"] = {**spec["nfd"], **nfd, "master": {**nfd, "nodeSelector": {REAL_NODE_LABEL: "true"}}, "worker": nfd}
    for key in KEYS:
        spec[key] = {**spec[key], **pinned}
    if driver:
        spec["driver"] = {**spec["driver"], **pinned, "version": driver, "notDeploy": False,
                          "env": standin_driver.driver_env()}
    if gcushare:
        spec["devicePlugin"]["notDeploy"] = True
        for key in GCUSHARE_KEYS:
            spec[key]["notDeploy"] = False
    spec["nightingale"] = {**spec["nightingale"], **pinned, "notDeploy": not nightingale}
    if nightingale_node:
        spec["nightingale"]["nodeSelector"] = {"kubernetes.io/hostname": nightingale_node}
    if nightingale_volume:
        spec["nightingale"]["mysql-pv"] = {"name": "mysql-pv", "hostpath": nightingale_volume}
    if upgrade_manager_node:
        spec["upgradeManager"] = {**pinned, "nodeSelector": {"kubernetes.io/hostname": upgrade_manager_node}}
    return seed


def containerd_settings() -> dict:
    return {
        # restartIn container: the node's /run/containerd is under /host in the toolkit's pod.
        "restartCommand": ["sh", "-c", f"kill $(cat /host{RealNode.CONTAINERD_PIDFILE})"],
        "restartIn": "container",
        "verifySeconds": 60,
    }


def policy_config() -> dict:
    """The policy pack's settings for a stack running the stand-in images: their repository allowed too."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policies"))
    from gcu_policies.rules import DEFAULT_REPOSITORIES

    return {"allowed-image-registries": {"allowedRepositories": [*DEFAULT_REPOSITORIES, REPOSITORY]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.standin_node", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    build = sub.add_parser("build")
    build.add_argument("--docker-state-dir", required=True, help="the state dir of `python -m devtools.dockerd up`")
    build.add_argument("--workdir", required=True)
    bp = sub.add_parser("blueprint")
    bp.add_argument("--gcushare", action="store_true",
                    help="GCU-share (plugin + scheduler extender) instead of the device plugin")
    bp.add_argument("--nightingale", action="store_true", help="deploy Nightingale (the seed does not)")
    bp.add_argument("--nightingale-node", help="the node Nightingale runs on (its database volume is there)")
    bp.add_argument("--nightingale-volume", help="the host path of Nightingale's database volume on that node")
    bp.add_argument("--driver", default=DRIVER_VERSIONS[0], metavar="VERSION",
                    help=f"the stand-in driver version to deploy (built: {', '.join(DRIVER_VERSIONS)}; default "
                         f"%(default)s); '' deploys no driver")
    sub.add_parser("containerd")
    sub.add_parser("policy-config")
    args = parser.parse_args(argv)
    if args.cmd == "build":
        from devtools.dockerd import Dockerd

        refs = build_images(Dockerd.from_state_dir(args.docker_state_dir), Path(args.workdir), DRIVER_VERSIONS)
        print("\n".join(refs))
    elif args.cmd == "blueprint":
        print(json.dumps(blueprint(args.gcushare, args.nightingale, args.nightingale_node, args.nightingale_volume,
                                   args.driver or None), indent=2))
    elif args.cmd == "containerd":
        print(json.dumps(containerd_settings()))
    else:
        print(json.dumps(policy_config()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
