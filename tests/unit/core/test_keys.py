"""Unknown keys of ours (and Kueue's podset keys) on a pod template are found, with the closest
known one; other prefixes are not ours to judge."""

from __future__ import annotations

from gangplugin.core.keys import KUEUE_PODSET_KEYS, POD_TEMPLATE_KEYS, UnknownKey, closest, unknown_keys
from gangplugin.kube.records import podset_from_template


def test_a_misspelt_key_is_found_with_the_key_it_misspells() -> None:
    found = unknown_keys(["gangplugin.io/required-toplogy", "gangplugin.io/required-topology"])
    assert found == (UnknownKey("gangplugin.io/required-toplogy", "gangplugin.io/required-topology"),)
    assert str(found[0]) == (
        "unknown key gangplugin.io/required-toplogy: did you mean gangplugin.io/required-topology?"
    )


def test_kueue_podset_keys_are_checked_and_other_prefixes_left_alone() -> None:
    keys = ["kueue.x-k8s.io/podset-slice-sise", "kueue.x-k8s.io/queue-name", "example.com/gangplugin.io-x"]
    (found,) = unknown_keys(keys)
    assert (
        found.key == "kueue.x-k8s.io/podset-slice-sise"
        and found.suggestion == "kueue.x-k8s.io/podset-slice-size"
    )
    assert unknown_keys(sorted(POD_TEMPLATE_KEYS | KUEUE_PODSET_KEYS)) == ()


def test_a_key_like_nothing_known_has_no_suggestion() -> None:
    (found,) = unknown_keys(["gangplugin.io/zzzzzzzz"])
    assert found.suggestion is None and str(found) == "unknown key gangplugin.io/zzzzzzzz"
    assert closest("gpu_worker", ["gpu_workers", "arrival_time"]) == "gpu_workers"


def test_a_pod_template_keeps_the_unknown_keys_of_its_annotations_and_labels() -> None:
    template = {
        "metadata": {
            "annotations": {"gangplugin.io/prefered-topology": "topology.k8s.aws/ultraserver-id"},
            "labels": {"gangplugin.io/gangg": "x", "app": "train"},
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    ps = podset_from_template("main", 2, template, "template", "count")
    assert ps.preferred_topology is None  # the misspelt key asks for nothing: hence the check
    assert [(k.key, k.field) for k in ps.unknown_keys] == [
        ("gangplugin.io/prefered-topology", "metadata.annotations"),
        ("gangplugin.io/gangg", "metadata.labels"),
    ]
