"""Cold and warm build times of every component image, and their ratio.

    .venv/bin/python bench/image_builds.py [--runs N]

Each run starts a fresh private dockerd (empty layer cache; overlay2, or vfs where
overlay2 cannot run), imports the
debootstrap base image (not timed; the rootfs tarball is cached), builds every
image from stand-in packages with the build arguments the pulumi-docker Image
gets (cold), then builds them all again without a change (warm).
Target: warm under half of cold (tests/test_image_builds.py asserts it).
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools import imagebuild  # noqa: E402


def one_run() -> tuple[imagebuild.Timings, imagebuild.Timings]:
    with tempfile.TemporaryDirectory(prefix="gcu-image-bench-") as work:
        with imagebuild.build_daemon(Path(work) / "dockerd") as dockerd:
            print(f"dockerd {dockerd.server_version}, storage driver {dockerd.storage_driver}")
            specs = imagebuild.prepare(dockerd, Path(work) / "project")
            return imagebuild.build_all(dockerd, specs), imagebuild.build_all(dockerd, specs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    ratios = []
    for run in range(1, args.runs + 1):
        cold, warm = one_run()
        for key, seconds in cold.per_image.items():
            print(f"run {run}  {key:18} cold {seconds:6.2f}s  warm {warm.per_image[key]:5.2f}s")
        ratios.append(warm.total / cold.total)
        print(f"run {run}  {'all images':18} cold {cold.total:6.2f}s  warm {warm.total:5.2f}s  ratio {ratios[-1]:.2f}")
    if args.runs > 1:
        print(f"median ratio {statistics.median(ratios):.2f} over {args.runs} runs")


if __name__ == "__main__":
    main()
