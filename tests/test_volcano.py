"""Volcano (components/catalog/volcano.py)."""

from harness import PASSWORD, fails, full_spec, run_program

RELEASE = "kubernetes:helm.sh/v3:Release"


def test_volcano_is_the_official_chart_with_spec_images(full):
    (release,) = full.of_type(RELEASE)
    inputs = release.inputs
    assert inputs["chart"] == "volcano" and inputs["version"] == "1.9.0"
    assert inputs["repositoryOpts"]["repo"] == "https://volcano-sh.github.io/helm-charts"
    assert inputs["namespace"] == "volcano-system"
    assert inputs["createNamespace"] is False
    basic = inputs["values"]["basic"]
    assert basic["image_registry"] == "artifact.enflame.cn"
    assert basic["controller_image_name"] == "enflame_docker_images/enflame/vc-controller-manager"
    assert basic["scheduler_image_name"] == "enflame_docker_images/enflame/vc-scheduler"
    assert basic["admission_image_name"] == "enflame_docker_images/enflame/vc-webhook-manager"
    assert full.one("Namespace", "volcano-system").inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_volcano_from_a_local_chart_archive(tmp_path):
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "volcano-1.9.0.tgz").write_bytes(b"stand-in archive")
    spec = full_spec(**{"volcano.repository": "mirror.local:5000/volcanosh", "volcano.version": "v1.9.0"})
    run = run_program(
        {"spec": spec, "nightingaleDbPassword": PASSWORD, "volcanoChart": {"path": "charts/volcano-1.9.0.tgz"}},
        secret_keys=("nightingaleDbPassword",),
        project_dir=tmp_path,
    )
    (release,) = run.of_type(RELEASE)
    assert release.inputs["chart"] == str(tmp_path / "charts" / "volcano-1.9.0.tgz")
    assert "repositoryOpts" not in release.inputs
    basic = release.inputs["values"]["basic"]
    assert (basic["image_registry"], basic["image_tag_version"]) == ("mirror.local:5000", "v1.9.0")
    assert basic["scheduler_image_name"] == "volcanosh/vc-scheduler"


def test_volcano_parts_that_the_chart_cannot_express_are_an_error():
    spec = full_spec(**{"volcano.scheduler": {"version": "v1.10.0"}, "volcano.controller": {"version": "v1.9.0"}})
    fails({"spec": spec, "nightingaleDbPassword": PASSWORD}, "spec.volcano: the Volcano chart needs one version")


def test_missing_local_chart_archive_is_an_error():
    fails({"spec": full_spec(), "volcanoChart": {"path": "charts/nope.tgz"}}, "gcu-stack:volcanoChart.path: chart archive")
