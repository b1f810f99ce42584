"""Object URLs: a name read from a spec is one path segment, never another path."""

from __future__ import annotations

import pytest

from trainplan.cluster.resources import path_segment, resource_path

BUDGETS = resource_path("trainplan.dev/v1alpha1", "GPUBudget")


def test_names_become_one_segment_of_the_namespace_s_collection() -> None:
    url = BUDGETS.item("team-a", "shared.budget-1", "status")
    assert url == "/apis/trainplan.dev/v1alpha1/namespaces/team-a/gpubudgets/shared.budget-1/status"


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../../team-b/gpubudgets/x", "a/b", "a%2Fb", "a?watch=1", "a#b", "a\\b"],
)
def test_a_name_that_would_be_another_path_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes name"):
        path_segment(name)
    with pytest.raises(ValueError, match="not a Kubernetes name"):
        BUDGETS.item("team-a", name)
    if name:  # no namespace at all is the collection across namespaces
        with pytest.raises(ValueError, match="not a Kubernetes name"):
            BUDGETS.collection(name)


def test_no_namespace_is_the_collection_across_namespaces() -> None:
    assert BUDGETS.collection(None) == "/apis/trainplan.dev/v1alpha1/gpubudgets"
