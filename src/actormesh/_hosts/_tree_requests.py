"""The controller's side of the requests that go down a tree of agents (``_subtree``):
one request per child of the controller, the answers of every host of its subtree; or,
to agents of one level, one request each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._exceptions import ActorDiedError

if TYPE_CHECKING:
    from ._agent_link import AgentLink
    from ._cast_tree import CastTree
    from ._subtree import Answer

__all__ = ["down_each", "down_tree"]


async def down_tree(
    tree: CastTree, op: str, groups: Sequence[tuple[AgentLink, Sequence[Any]]], *extra: Any
) -> list[Answer]:
    """Send ``op`` (with ``extra``) through ``tree`` to every agent of ``groups``, each
    with its items; each group's answer, in order. A host whose answer cannot come (the
    agent this process reached it by died) is answered ``("lost", why)`` here."""
    targets = {tree.position(link): list(items) for link, items in groups}
    answers: dict[int, Answer] = {}
    gone: dict[int, str] = {}  # the children of this process that died, why

    async def down(top: AgentLink, items: list[Any], below: list[Any]) -> None:
        try:
            answer = await top.down_tree(op, items, below, *extra)
        except ActorDiedError as error:
            gone[tree.position(top)] = str(error)
            answers[tree.position(top)] = (
                "lost",
                f"the host agent on {top.where} is gone: {error}",
            )
            return
        for address, result in answer.items():
            link = top if address == "" else tree.link_at(address)
            if link is not None:
                answers[tree.position(link)] = result

    await asyncio.gather(*(down(*branch) for branch in tree.branches(targets)))
    results = []
    for link, _ in groups:
        answer = answers.get(tree.position(link))
        if answer is None:
            top, _ = tree.route(link)
            why = gone.get(tree.position(top), "it did not answer")
            answer = (
                "lost",
                f"the host agent on {top.where}, which relays to this host, is gone: {why}",
            )
        results.append(answer)
    return results


async def down_each(
    op: str, groups: Sequence[tuple[AgentLink, Sequence[Any]]], *extra: Any
) -> list[Answer]:
    """Send ``op`` (with ``extra``) to each agent of ``groups`` (agents of one level),
    each with its items; each group's answer, in order (``("lost", why)`` for an agent
    that died before it answered)."""

    async def one(link: AgentLink, items: Sequence[Any]) -> Answer:
        try:
            answer: Answer = (await link.down_tree(op, items, [], *extra))[""]
        except ActorDiedError as error:
            return ("lost", f"the host agent on {link.where} is gone: {error}")
        return answer

    return list(await asyncio.gather(*(one(link, items) for link, items in groups)))
