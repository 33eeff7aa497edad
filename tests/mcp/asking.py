"""The person at an MCP client that declares elicitation: the SDK's own callback, scripted.

``Person(answer)`` is passed to ``ClientSession`` as its ``elicitation_callback`` (which
makes the SDK declare the capability in ``initialize``); it keeps every form it was
shown and answers each as told: ``approve`` or ``deny`` (the form filled in),
``decline`` or ``cancel`` (MCP's two other actions), or ``never`` (it waits until the
request is withdrawn or the session ends). ``before`` runs first, on the same session,
while the proxy waits for the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.client.session import ClientRequestContext
from mcp.types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult, Implementation

CLIENT_NAME = "alice at the desk"


class Person:
    """Answers the proxy's approval forms as told, and remembers each form."""

    def __init__(
        self,
        answer: str,
        *,
        note: str = "",
        before: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.answer = answer
        self.note = note
        self.before = before
        self.forms: list[ElicitRequestFormParams] = []
        self.withdrawn = 0  # forms the proxy withdrew before an answer

    async def __call__(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult:
        del context
        assert isinstance(params, ElicitRequestFormParams), params
        self.forms.append(params)
        if self.before is not None:
            await self.before()
        if self.answer == "never":
            try:
                await anyio.sleep_forever()
            finally:
                self.withdrawn += 1
        if self.answer in ("decline", "cancel"):
            return ElicitResult(action=self.answer)
        content: dict[str, Any] = {"decision": self.answer}
        if self.note:
            content["note"] = self.note
        return ElicitResult(action="accept", content=content)

    def callbacks(self) -> dict[str, Any]:
        """The ``ClientSession`` keywords of a client with this person at it."""
        return {
            "elicitation_callback": self,
            "client_info": Implementation(name=CLIENT_NAME, version="1.0"),
        }
