"""An agent judged by its suite, for tests: Support v1 (published) and v2 (a draft) on a strict
local provider that calls the clock only when its system prompt tells it to; v1 fails the one
case of its suite, v2 passes it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from chat import agents, transcripts
from chat.agent import ChatMessage
from chat.evals import cases
from chat.models import Agent, AgentVersion, Conversation, ProviderProfile, Visibility
from chat.testing import factories as make
from chat.testing.openai_script import MODEL, ScriptedResponse, text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer

CLOCK_PROMPT = "Use the clock for any question about time."
OLD_PROMPT = "You answer questions about the cards."
QUESTION = "What time is it in Paris?"
CLOCK_CALL = ("call_1", "get_current_time", '{"timezone": "Europe/Paris"}')


def by_prompt(body: Any) -> ScriptedResponse:
    """A provider that calls the clock only when its system prompt tells it to."""
    prompts = [m.get("content") for m in body["messages"] if m["role"] == "system"]
    if CLOCK_PROMPT in prompts:
        return tool_turn([CLOCK_CALL])
    return text_turn("I cannot tell the time.")


def local_profile(server: FakeOpenAIServer) -> ProviderProfile:
    """A profile everyone may use, on `server`, which now answers by the system prompt."""
    server.responder = by_prompt
    return ProviderProfile.objects.create(
        name="local",
        base_url=server.base_url,
        api_key_env="",
        model=MODEL,
        available_to_everyone=True,
    )


def conversation_with(owner: User, profile: ProviderProfile, **parameters: Any) -> Conversation:
    made = make.conversation(owner, "settings", **parameters)
    made.profile = profile
    made.save()
    return made


def support_with_suite(ada: User, local: ProviderProfile) -> Agent:
    """Support v1 (published, the old prompt, the cards' search) and v2 (a draft: the clock
    prompt, the clock and a temperature), with a suite of one case kept from a conversation
    held with yet another prompt and tool."""
    made = conversation_with(
        ada, local, system_prompts=[OLD_PROMPT], enabled_tools=["search_cards"]
    )
    agent = agents.create_agent(
        name="Support", conversation=made, user=ada, visibility=Visibility.TEAM
    )
    made.set_agent_parameters(
        made.agent_parameters().changed(
            system_prompts=(CLOCK_PROMPT,),
            pre_messages=({"role": "assistant", "content": "Ask me anything."},),
            enabled_tools=("get_current_time",),
            temperature=0.2,
        )
    )
    made.save()
    agents.new_version(agent=agent, conversation=made, user=ada, note="Use the clock.")
    kept = conversation_with(
        ada,
        local,
        system_prompts=["A prompt of the day the case was kept."],
        pre_messages=[{"role": "user", "content": "Be brief."}],
        enabled_tools=["search_cards"],
    )
    transcripts.append_messages(kept, [ChatMessage(role="user", content=QUESTION)], start=0)
    case = cases.save_case(
        kept,
        0,
        set_name="Support suite",
        user=ada,
        expected={"tool_calls": [{"name": "get_current_time", "arguments": {}}]},
    )
    agent.suite = case.case_set
    agent.save()
    return agent


def version_of(agent: Agent, number: int) -> AgentVersion:
    return agent.versions.select_related("agent", "profile").get(number=number)


def default_agent_on(owner: User, profile: ProviderProfile) -> Agent:
    """An agent on `profile`, chosen as `owner`'s default: their new conversations start with
    it. The conversation it was made from is gone (its version keeps the settings), so `owner`
    still sees the first screen."""
    made = conversation_with(owner, profile)
    agent = agents.create_agent(name=f"On {profile.name}", conversation=made, user=owner)
    agents.choose_default(user=owner, agent=agent)
    made.delete()
    return agent
