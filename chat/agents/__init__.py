"""Agents: a conversation's settings kept under a name, in immutable versions, one published,
shared with the team or kept private (the rows are `chat.models.agents`; who may do what,
`chat.access`).

- `versions`: an agent made from a conversation's settings (version 1, published), a new
  version from a conversation's settings, what a version holds, a conversation started from a
  version, a version named as NAME or NAME@N.
- `publishing`: which version new conversations use, and the record of who published it.
- `differences`: what differs between two versions, or a version and a conversation's settings.
- `defaults`: the built-in Default (the server's own settings, never stored) and each user's
  default agent.
- `suites`: a version evaluated on the agent's suite, and publishing through it (the gate).
- `records` and `texts`: the JSON of `agents export`/`import`, and what the terminal prints.
- Pages: `views` (choosing an agent, a conversation's changes and saving them), `page` (an
  agent's versions, their conversations, marks and evaluations, its suite), `actions` (a
  version's Evaluate and Publish), `forms`.

Every function asks the rule and, when it refuses, raises AgentRefused (one line for the user)
having stored nothing. The functions are synchronous: async callers wrap them in
`sync_to_async`.
"""

from chat.models import Agent, AgentChoice, AgentVersion, Configuration, Publication, Visibility

from .defaults import (
    DEFAULT,
    BuiltInAgent,
    Offer,
    choose_default,
    default_agent,
    default_version,
    offered_to,
)
from .differences import Difference, Line, TextChange, ValueChange, difference
from .exceptions import AgentRefused
from .publishing import publish
from .versions import (
    configuration,
    create_agent,
    find_version,
    new_version,
    start_conversation,
)

__all__ = [
    "DEFAULT",
    "Agent",
    "AgentChoice",
    "AgentRefused",
    "AgentVersion",
    "BuiltInAgent",
    "Configuration",
    "Difference",
    "Line",
    "Offer",
    "Publication",
    "TextChange",
    "ValueChange",
    "Visibility",
    "choose_default",
    "configuration",
    "create_agent",
    "default_agent",
    "default_version",
    "difference",
    "find_version",
    "new_version",
    "offered_to",
    "publish",
    "start_conversation",
]
