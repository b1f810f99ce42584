"""`trainplan render` of every example equals its golden file.

For each example `deploy/examples/<name>.yaml` and `deploy/examples/frameworks/<name>.yaml`
the golden file `tests/golden/files/<name>.yaml` holds exactly what
`trainplan render deploy/examples/[frameworks/]<name>.yaml` prints when run from the
repository root. An example that does not render (`tiny-local`, which has no `job.image`:
it is meant for `trainplan run --local`) has `tests/golden/files/<name>.txt` instead: the
exit status and the error lines.

After an intended change to the launcher, the planner or an example, rewrite the golden
files and review the diff:

    TRAINPLAN_UPDATE_GOLDEN=1 .venv/bin/pytest -q -p no:cacheprovider tests/golden

With TRAINPLAN_UPDATE_GOLDEN=1 every file is rewritten and the comparisons pass; stale
golden files (of examples that no longer exist) are reported either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tests.rendered_examples import (
    EXAMPLE_IDS,
    EXAMPLES,
    NOT_RENDERABLE,
    RENDERABLE,
    RENDERABLE_IDS,
    ROOT,
    Rendered,
    command_lines,
    example_objects,
    render_example,
    training_container,
)
from trainplan.planner import Catalog

GOLDEN_DIR = Path(__file__).resolve().parent / "files"

UPDATE = os.environ.get("TRAINPLAN_UPDATE_GOLDEN") == "1"


def _golden_text(rendered: Rendered) -> tuple[str, str]:
    """(file name suffix, content) of the golden file for a rendering."""
    if rendered.ok:
        return ".yaml", rendered.stdout
    lines = [f"# exit status {rendered.status}", *rendered.stderr_lines]
    return ".txt", "\n".join(lines) + "\n"


def test_example_names_are_unique() -> None:
    assert len(set(EXAMPLE_IDS)) == len(EXAMPLE_IDS)
    assert any("frameworks" in path.parts for path in EXAMPLES)
    assert set(EXAMPLE_IDS) >= NOT_RENDERABLE


@pytest.mark.parametrize("path", EXAMPLES, ids=EXAMPLE_IDS)
def test_render_output_equals_the_golden_file(path: Path, catalog: Catalog) -> None:
    suffix, text = _golden_text(render_example(path, catalog))
    golden = GOLDEN_DIR / f"{path.stem}{suffix}"
    other = GOLDEN_DIR / f"{path.stem}{'.txt' if suffix == '.yaml' else '.yaml'}"
    if UPDATE:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        other.unlink(missing_ok=True)
    assert golden.exists(), f"no golden file {golden.name}; run with TRAINPLAN_UPDATE_GOLDEN=1"
    assert not other.exists(), f"stale golden file {other.name}"
    assert text == golden.read_text(encoding="utf-8")


def test_no_golden_file_without_an_example() -> None:
    stale = sorted(path.name for path in GOLDEN_DIR.iterdir() if path.stem not in EXAMPLE_IDS)
    assert not stale


@pytest.mark.parametrize("path", RENDERABLE, ids=RENDERABLE_IDS)
def test_golden_yaml_is_one_document_per_object_with_a_leading_comment(
    path: Path, catalog: Catalog
) -> None:
    rendered = render_example(path, catalog)
    assert rendered.ok, rendered.stderr_lines
    assert rendered.stdout.startswith(f"---\n# Source: {path.relative_to(ROOT)}\n")
    documents = list(yaml.safe_load_all(rendered.stdout))
    assert [document["kind"] for document in documents][-1] in ("Job", "JobSet")
    assert rendered.stdout.count("\n---\n") + 1 == len(documents)


def test_the_example_without_an_image_says_so(catalog: Catalog) -> None:
    (path,) = [path for path in EXAMPLES if path.stem in NOT_RENDERABLE]
    rendered = render_example(path, catalog)

    assert rendered.status == 2
    assert rendered.stderr_lines == (
        "deploy/examples/tiny-local.yaml: spec.job.image: required to render the training "
        "job (a container image)",
    )


FRAMEWORK_EXAMPLES = [path for path in EXAMPLES if "frameworks" in path.parts]


@pytest.mark.parametrize("path", FRAMEWORK_EXAMPLES, ids=[p.stem for p in FRAMEWORK_EXAMPLES])
def test_docs_show_each_frameworks_rendered_command(path: Path, catalog: Catalog) -> None:
    """docs/frameworks.md shows the rendered command (and ds_config.json) of each example."""
    docs = (ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8")
    objects = example_objects(path, catalog, uid=None)
    container = training_container(objects)

    assert f"```sh\n{command_lines(container['command'], container['args'])}\n```" in docs
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            (text,) = obj["data"].values()
            assert f"```json\n{text.rstrip()}\n```" in docs
