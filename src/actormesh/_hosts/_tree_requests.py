"""The controller's side of the requests that go down a tree of agents (``_subtree``):
one request per child of the controller, the answers of every host of its subtree; or,
to agents of one level, one request each."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._exceptions import ActorDiedError
from ._subtree import Answer, branch_addresses

if TYPE_CHECKING:
    from ._agent_link import AgentLink
    from ._cast_tree import CastTree

__all__ = ["down_each", "down_tree"]


async def down_tree(
    tree: CastTree, op: str, groups: Sequence[tuple[AgentLink, Sequence[Any]]], *extra: Any
) -> list[Answer]:
    """Send ``op`` (with ``extra``) through ``tree`` to every agent of ``groups``, each
    with its items; each group's answer, in order. A host whose answer cannot come (an
    agent on its way died) is answered ``("lost", why)``, naming that agent's host."""
    targets = {tree.position(link): list(items) for link, items in groups}
    answers: dict[int, Answer] = {}

    def lost(address: str, dead: AgentLink | None, why: str = "") -> None:
        link = tree.link_at(address)
        if link is not None and dead is not None:
            answers[tree.position(link)] = ("lost", gone_text(link, dead, why))

    async def down(top: AgentLink, items: list[Any], below: list[Any]) -> None:
        try:
            answer = await top.down_tree(op, items, below, *extra)
        except ActorDiedError as error:  # no answer for its whole branch
            for address in branch_addresses((tree.address(top), items, below)):
                lost(address, top, _how(top, error))
            return
        for address, result in answer.items():
            address = address or tree.address(top)
            if result[0] == "lost":  # (an agent below died: the address of its host)
                lost(address, tree.link_at(result[1]))
            else:
                link = tree.link_at(address)
                if link is not None:
                    answers[tree.position(link)] = result

    await asyncio.gather(*(down(*branch) for branch in tree.branches(targets)))
    return [
        answers.get(tree.position(link), ("lost", f"{link.where} did not answer"))
        for link, _ in groups
    ]


def _how(link: AgentLink, error: ActorDiedError) -> str:
    """How ``link``'s agent went, from the error its request failed with."""
    return str(error).removeprefix(f"the host agent on {link.where} is gone: ")


def gone_text(link: AgentLink, dead: AgentLink, why: str = "") -> str:
    """Why ``link``'s host gave no answer: ``dead``'s agent, its own or on its way, died."""
    text = f"the host agent on {dead.where}"
    text += " is gone" if dead is link else ", which relays to this host, is gone"
    return f"{text}: {why}" if why else text


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
            return ("lost", gone_text(link, link, _how(link, error)))
        return answer

    return list(await asyncio.gather(*(one(link, items) for link, items in groups)))
