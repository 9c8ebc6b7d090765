"""A run another process began, published by the process that resumed it.

Its first frame shows the conversation as stored (the sockets that reconnected here have the
page of the process that stopped), the reply so far rebuilt from the run's rows. The text of
the turn that was streaming stays on the page, marked, until the new text of that turn
replaces it.
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from chat import agent
from chat.agent import events
from chat.fragments import RunPublisher
from chat.live_markdown import LiveMarkdown
from chat.models import Message, Run
from chat.templatetags.chat_tags import fragment_id
from chat.turns import turn_for_run


class ResumedPublisher(RunPublisher):
    def __init__(self, run: Run, draft: Message | None = None) -> None:
        super().__init__(run, new_version=True)  # the opening frame: the whole transcript
        self.draft = draft
        self.state.draft = (draft.content or "") if draft is not None else ""

    async def __call__(self, run: Run, event: events.RunEvent) -> None:
        if isinstance(event, events.RunStarted):
            # Seeded before the run goes on: a call answered at once (a denial) must not be in
            # the opening frame as well as in the frame of its own end.
            await database_sync_to_async(self._seed)()
        await super().__call__(run, event)

    def _seed(self) -> None:
        """The live state as if this process had published the run from its start."""
        turn = turn_for_run(self.run)
        draft = self.draft.pk if self.draft is not None else None
        replies = [m for m in turn.replies if m.pk != draft]
        self.state.text = ["\n\n".join(m.content for m in replies if m.content)]
        self.state.markdown = LiveMarkdown(self.state.text[0])
        self.state.reasoning = ["\n\n".join(m.reasoning for m in replies if m.reasoning)]
        self._paragraph_break = bool(self.state.text[0])
        self.state.finished = [
            events.ToolResult(
                tool_call=agent.ToolCall(id=call.call_id, name=call.name, arguments=call.arguments),
                content=call.result,
                status="completed" if call.status == "completed" else "failed",
                error=call.error or None,
                failure=call.failure,
            )
            for call in turn.tool_calls
            if not call.is_active
        ]

    def _drain(self) -> str:
        html = super()._drain()
        if html and self.state.draft:
            # The turn's new text is here: the old text of it goes.
            self.state.draft = ""
            gone = fragment_id("reply", self.run.pk, "draft")
            html = f'<span id="{gone}" hx-swap-oob="delete"></span>' + html
        return html
