"""docs/api-reference.md is generated from the CRDs: it must not drift from them."""

from agentsession_api import apidoc


def test_api_reference_is_current() -> None:
    assert apidoc.main(["--check"]) == 0, "run `make crds` to regenerate docs/api-reference.md"


def test_every_spec_field_is_documented() -> None:
    text = apidoc.render()
    for field in (
        "spec.warmPoolRef",
        "spec.ttl",
        "spec.idleTimeout",
        "spec.idleAction",
        "spec.env",
        "spec.volumeClaimTemplates",
        "spec.labels",
        "spec.podLabels",
        "spec.podAnnotations",
        "spec.suspend",
        "spec.limits.maxTtl",
        "spec.cleanup.deleteFinishedAfter",
    ):
        assert f"`{field}`" in text
