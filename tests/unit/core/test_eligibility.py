import pytest

from gangplugin.core.eligibility import PodConstraints, Requirement, Taint, Toleration

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        (Toleration("nvidia.com/gpu", "Exists"), True),
        (Toleration("nvidia.com/gpu", "Equal", "present"), True),
        (Toleration("nvidia.com/gpu", "Equal", "absent"), False),
        (Toleration("nvidia.com/gpu", "Exists", effect="NoExecute"), False),
        (Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule"), True),
        (Toleration("", "Exists"), True),
        (Toleration("other", "Exists"), False),
    ],
)
def test_tolerations(toleration, ok):
    cons = PodConstraints(tolerations=(toleration,))
    assert (cons.untolerated((GPU_TAINT,)) is None) is ok


def test_prefer_no_schedule_is_ignored_and_no_execute_blocks():
    cons = PodConstraints()
    assert cons.untolerated((Taint("a", "", "PreferNoSchedule"),)) is None
    assert cons.untolerated((Taint("a", "", "NoExecute"),)) == Taint("a", "", "NoExecute")
    assert str(Taint("a", "", "NoExecute")) == "a:NoExecute"
    assert str(GPU_TAINT) == "nvidia.com/gpu=present:NoSchedule"


LABELS = {"zone": "a", "gen": "5", "gpu": "h100"}


@pytest.mark.parametrize(
    ("req", "ok"),
    [
        (Requirement("zone", "In", ("a", "b")), True),
        (Requirement("zone", "In", ("b",)), False),
        (Requirement("zone", "NotIn", ("b",)), True),
        (Requirement("missing", "NotIn", ("b",)), True),
        (Requirement("zone", "NotIn", ("a",)), False),
        (Requirement("gpu", "Exists"), True),
        (Requirement("missing", "Exists"), False),
        (Requirement("missing", "DoesNotExist"), True),
        (Requirement("gpu", "DoesNotExist"), False),
        (Requirement("gen", "Gt", ("4",)), True),
        (Requirement("gen", "Gt", ("5",)), False),
        (Requirement("gen", "Lt", ("6",)), True),
        (Requirement("gen", "Lt", ("5",)), False),
        (Requirement("gpu", "Gt", ("1",)), False),
        (Requirement("missing", "Lt", ("1",)), False),
        (Requirement("metadata.name", "In", ("n1",), field=True), True),
        (Requirement("metadata.name", "NotIn", ("n1",), field=True), False),
    ],
)
def test_affinity_operators(req, ok):
    assert req.matches(LABELS, "n1") is ok
    cons = PodConstraints(affinity_terms=((req,),))
    assert cons.selects(LABELS, "n1") is ok


def test_selector_and_terms():
    assert PodConstraints(node_selector=(("zone", "a"),)).selects(LABELS, "n")
    assert not PodConstraints(node_selector=(("zone", "b"),)).selects(LABELS, "n")
    # terms are ORed, requirements ANDed; an empty term list or empty term matches nothing
    t_no = (Requirement("zone", "In", ("b",)),)
    t_yes = (Requirement("zone", "In", ("a",)), Requirement("gen", "Gt", ("1",)))
    assert PodConstraints(affinity_terms=(t_no, t_yes)).selects(LABELS, "n")
    assert not PodConstraints(affinity_terms=(t_no,)).selects(LABELS, "n")
    assert not PodConstraints(affinity_terms=()).selects(LABELS, "n")
    assert not PodConstraints(affinity_terms=((),)).selects(LABELS, "n")
    assert PodConstraints().selects({}, "n")
