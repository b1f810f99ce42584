"""The operator's shared context as the operator stops: what it closes stays closed."""

from __future__ import annotations

import pytest

from trainplan.cluster import Connection
from trainplan.controller.context import ControllerContext
from trainplan.planner import Catalog


@pytest.mark.asyncio
async def test_nothing_makes_a_new_client_after_close(catalog: Catalog) -> None:
    """A handler or ETA revision still running when Kopf's cleanup closed the context
    would make an API client or scrape session that nothing closes (seen as aiohttp's
    "Unclosed client session" at garbage collection): both refuse instead."""
    context = ControllerContext(catalog=catalog, connection=Connection(server="http://127.0.0.1:1"))
    api, session = context.api(), context.revisions.session()
    assert context.api() is api
    await context.close()
    assert session.closed
    with pytest.raises(RuntimeError, match="stopping"):
        context.api()
    with pytest.raises(RuntimeError, match="stopping"):
        context.revisions.session()
