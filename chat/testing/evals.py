"""Conversations and cases for evaluation tests: a stored tool decision to keep and replay."""

from __future__ import annotations

import asyncio

from django.contrib.auth.models import User

from chat.evals import cases
from chat.models import Case, Conversation
from chat.runs import tasks

from . import factories as make

QUESTION = "search the cards for pills"


def searched(owner: User, title: str = "Pills") -> Conversation:
    """A conversation where the scripted model searched the cards and answered: messages 0
    (user), 1 (assistant calling search_cards), 2 (tool), 3 (assistant)."""
    made = make.conversation(owner, title, enabled_tools=["search_cards", "get_current_time"])
    make.run_turn(made, QUESTION)
    return made


def search_case(owner: User, set_name: str = "cards", **options: object) -> Case:
    """The moment after the question of `searched`, expecting search_cards as it was called."""
    return cases.save_case(searched(owner), 0, set_name=set_name, user=owner, **options)  # type: ignore[arg-type]


async def settle(seconds: float = 30) -> None:
    """Wait for the evaluations (and publications) this process started in the background."""
    async with asyncio.timeout(seconds):
        while tasks.background:
            await asyncio.wait(list(tasks.background))
