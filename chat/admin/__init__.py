"""What agents did, in the admin: transcripts with their tool calls, runs, model calls.

Everything here is a record, so it is read-only: the only change the admin makes is deleting a
conversation, which takes its runs, messages and logs with it. Pages run a fixed number of
queries however long the conversation is. Provider profiles and MCP servers are settings, not
records: staff edit them here (keys stay in the environment; the admin tells only whether one
is set). Annotations are the team's judgements of replies and tool calls: staff add and edit
them here as in the chat, with the same rules. Cases are kept moments of conversations: staff
correct their title, note and expectation here; evaluations of them are records. Agents are
the team's configurations: staff correct an agent's name, description, visibility and suite
where the agents' rule lets them; its versions and who published which are records.

- `base`: the shared look, read-only records and inlines, links, pills.
- `filters`: list filters. `transcript`: the conversation page's view-model.
- one module per admin family: `conversations`, `providers`, `mcp`, `runs`, `messages`,
  `annotations`, `cases`, `evals`, `agents`.
"""

from django.contrib import admin

from . import agents, annotations, cases, conversations, evals, mcp, messages, providers, runs

admin.site.site_header = "Agent Lab administration"
admin.site.site_title = "Agent Lab admin"
admin.site.index_title = "Records and settings"

__all__ = [
    "agents",
    "annotations",
    "cases",
    "conversations",
    "evals",
    "mcp",
    "messages",
    "providers",
    "runs",
]
