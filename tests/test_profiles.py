"""Provider profiles: edited by staff in the admin, chosen per conversation in the settings panel,
used by the conversation's runs. Keys stay in the environment: pages tell only whether one is set.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from chat import agent, runs, transcripts
from chat.models import Conversation, ModelCall, ProviderProfile
from chat.testing import factories as make
from chat.testing.openai_script import text_turn, tool_turn
from chat.testing.openai_server import FakeOpenAIServer
from tests.management.test_check_provider import ALNUM9, mistral_rules

CANARY = "canary-key-value-7f3a9c"
WARNING = "MISTRAL_API_KEY is not set on the server; requests will be sent without a key"


def admin_url(view: str, *args: object) -> str:
    return reverse(f"admin:chat_providerprofile_{view}", args=args)


def profile(name: str = "mistral", **fields: Any) -> ProviderProfile:
    values: dict[str, Any] = {
        "base_url": "https://api.mistral.ai/v1",
        "api_key_env": "MISTRAL_API_KEY",
        "model": "mistral-small-latest",
        "tool_call_ids": "alnum9",
        "parallel_tool_calls": False,
        "available_to_everyone": True,
    }
    values.update(fields)
    return ProviderProfile.objects.create(name=name, **values)


# The admin ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_staff_add_change_list_and_delete_profiles(staff: Client) -> None:
    response = staff.post(admin_url("add"), make.profile_form(parallel_tool_calls=""))
    assert response.status_code == 302, response.context["adminform"].form.errors
    created = ProviderProfile.objects.get()
    assert (created.api_key_env, created.tool_call_ids) == ("MISTRAL_API_KEY", "alnum9")
    assert created.parallel_tool_calls is False

    page = staff.get(admin_url("change", created.pk))
    assert page.status_code == 200 and b'name="_save"' in page.content

    changed = make.profile_form(
        model="mistral-large-latest", reasoning_field="reasoning_content", parallel_tool_calls="on"
    )
    assert staff.post(admin_url("change", created.pk), changed).status_code == 302
    created.refresh_from_db()
    assert created.model == "mistral-large-latest"
    assert created.reasoning_field == "reasoning_content" and created.parallel_tool_calls

    listing = staff.get(admin_url("changelist")).content.decode()
    for text in ("mistral-large-latest", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"):
        assert text in listing
    assert 'class="field-tool_call_ids">9 letters or digits (Mistral)<' in listing
    assert 'class="field-reasoning_field_display">reasoning_content<' in listing

    assert staff.post(admin_url("delete", created.pk), {"post": "yes"}).status_code == 302
    assert not ProviderProfile.objects.exists()


@pytest.mark.django_db
def test_non_staff_and_anonymous_cannot_reach_or_change_profiles(client: Client) -> None:
    existing = profile()
    pages = [admin_url("changelist"), admin_url("add"), admin_url("change", existing.pk)]
    for who in (None, make.user("bob")):
        if who is not None:
            client.force_login(who)
        for page in pages:
            response = client.get(page)
            assert response.status_code == 302 and "/admin/login/" in response["Location"]
        client.post(admin_url("add"), make.profile_form(name="sneaky"))
        client.post(admin_url("change", existing.pk), make.profile_form(model="hijacked"))
        client.post(admin_url("delete", existing.pk), {"post": "yes"})
    existing.refresh_from_db()
    assert existing.model == "mistral-small-latest"
    assert list(ProviderProfile.objects.values_list("name", flat=True)) == ["mistral"]


@pytest.mark.django_db
def test_staff_without_profile_permissions_is_refused(client: Client) -> None:
    viewer = make.user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_providerprofile"))
    client.force_login(viewer)
    existing = profile()

    assert client.get(admin_url("changelist")).status_code == 200
    page = client.get(admin_url("change", existing.pk))
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert client.get(admin_url("add")).status_code == 403
    assert (
        client.post(admin_url("change", existing.pk), make.profile_form(model="x")).status_code
        == 403
    )
    existing.refresh_from_db()
    assert existing.model == "mistral-small-latest"


@pytest.mark.django_db
def test_the_key_indicator_says_yes_or_no_and_never_shows_the_value(
    staff: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY_API_KEY", CANARY)
    monkeypatch.delenv("MISSING_API_KEY", raising=False)
    present = profile("present", api_key_env="CANARY_API_KEY")
    missing = profile("missing", api_key_env="MISSING_API_KEY")
    profile("keyless", api_key_env="")

    listing = staff.get(admin_url("changelist")).content.decode()

    assert CANARY not in listing

    def key_cell(name: str) -> str:
        (row,) = [
            row for row in re.findall(r"<tr>.*?</tr>", listing, re.DOTALL) if f">{name}</a>" in row
        ]
        cell = re.search(r'<td class="field-key_set">(.*?)</td>', row, re.DOTALL)
        assert cell is not None
        return cell.group(1)

    assert 'alt="True"' in key_cell("present")
    assert 'alt="False"' in key_cell("missing")
    assert 'alt="None"' in key_cell("keyless")
    page = staff.get(admin_url("change", present.pk)).content.decode()
    assert "CANARY_API_KEY is set in this server process." in page and CANARY not in page
    page = staff.get(admin_url("change", missing.pk)).content.decode()
    assert "MISSING_API_KEY is NOT set in this server process" in page


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("api_key_env", "sk-live-0123456789abcdef", "the name of an environment variable"),
        ("api_key_env", "mistral_api_key", "the name of an environment variable"),
        ("api_key_env", "1KEY", "the name of an environment variable"),
        ("api_key_env", "MY KEY", "the name of an environment variable"),
        ("base_url", "ftp://files.example.com/v1", "must start with http:// or https://"),
        ("base_url", "not a url", "must start with http"),
        ("base_url", "https://user:sk-secret@api.example.com/v1", "carries credentials"),
        ("base_url", "https://api.example.com/v1?api-key=abc", "carries a key in its query"),
        ("name", "", "This field is required"),
        ("model", "", "This field is required"),
    ],
)
@pytest.mark.django_db
def test_invalid_profiles_are_refused_with_the_reason(
    staff: Client, field: str, value: str, expected: str
) -> None:
    response = staff.post(admin_url("add"), make.profile_form(**{field: value}))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert expected in " ".join(errors[field]), errors
    assert not ProviderProfile.objects.exists()


@pytest.mark.django_db
def test_an_empty_key_variable_means_no_key(staff: Client) -> None:
    response = staff.post(
        admin_url("add"), make.profile_form(api_key_env="", parallel_tool_calls="on")
    )
    assert response.status_code == 302
    assert ProviderProfile.objects.get().api_key_env == ""


@pytest.mark.django_db
def test_the_list_counts_and_links_the_conversations_of_each_profile(staff: Client) -> None:
    used, unused = profile("used"), profile("unused")
    owner = make.user("ada")
    for title in ("one", "two"):
        Conversation.objects.create(owner=owner, title=title, profile=used)
    Conversation.objects.create(owner=owner, title="default")

    response = staff.get(admin_url("changelist"))

    counts = {row.name: row.n_conversations for row in response.context["cl"].result_list}
    assert counts == {"unused": 0, "used": 2}
    # Every conversation on the profile, evaluation replays too: the link asks for all purposes.
    link = f"{reverse('admin:chat_conversation_changelist')}?provider={used.pk}&purpose__exact=all"
    assert f'href="{link.replace("&", "&amp;")}">2<' in response.content.decode()
    listed = staff.get(link)
    assert {c.title for c in listed.context["cl"].result_list} == {"one", "two"}
    assert unused.pk


@pytest.fixture
def editor(client: Client) -> Client:
    """Staff who may add and change profiles, not a superuser."""
    user = make.user("editor", is_staff=True)
    codenames = ["view_providerprofile", "add_providerprofile", "change_providerprofile"]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        ("SECRET_KEY", "one of the server's own secrets"),
        ("DATABASE_URL", "one of the server's own secrets"),
        ("REDIS_URL", "one of the server's own secrets"),
        ("SOMEONES_TOKEN", "AGENTLAB_KEY_VARIABLES"),
    ],
)
@pytest.mark.django_db
def test_a_profile_editor_cannot_name_a_variable_that_is_not_allowed(
    editor: Client, settings: Any, variable: str, expected: str
) -> None:
    settings.AGENTLAB_KEY_VARIABLES = ["SECRET_KEY", "DATABASE_URL", "REDIS_URL"]
    response = editor.post(admin_url("add"), make.profile_form(api_key_env=variable))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert expected in " ".join(errors["api_key_env"]), errors
    assert not ProviderProfile.objects.exists()


@pytest.mark.django_db
def test_the_admin_never_tells_whether_a_variable_that_is_not_allowed_exists(
    staff: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_KEY", CANARY)
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    existing = profile("existing", api_key_env="SECRET_KEY")
    absent = profile("absent", api_key_env="NO_SUCH_TOKEN")

    listing = staff.get(admin_url("changelist")).content.decode()

    cells = re.findall(r'<td class="field-key_set">(.*?)</td>', listing, re.DOTALL)
    assert len(cells) == 2 and cells[0] == cells[1] and 'alt="None"' in cells[0]
    assert listing.count("(not allowed)") == 2
    pages = [staff.get(admin_url("change", one.pk)).content.decode() for one in (existing, absent)]
    assert "SECRET_KEY is one of the server&#x27;s own secrets" in pages[0]
    assert "NO_SUCH_TOKEN is not an allowed key variable" in pages[1]
    for page in pages:
        assert "Runs with this profile are refused." in page
        assert "is set" not in page and "NOT set" not in page and CANARY not in page


# The settings panel -------------------------------------------------------------------------


def settings_url(conversation: Conversation) -> str:
    return reverse("chat:conversation_settings", args=[conversation.pk])


def panel_data(**overrides: Any) -> dict[str, Any]:
    """The settings panel's form with a profile choice and a blank pre-message row."""
    panel = {"agent-profile": "", "agent-enabled_tools": ["get_current_time"]}
    blank_row = {"pre-0-role": "user", "pre-0-content": ""}
    return make.settings_form(**{**panel, **blank_row, **overrides})


@pytest.fixture
def owner_client(client: Client) -> Client:
    client.force_login(make.user("ada"))
    return client


@pytest.fixture
def conversation() -> Conversation:
    return make.conversation(make.user("ada"), "Chat", enabled_tools=["get_current_time"])


@pytest.mark.django_db
def test_the_panel_offers_the_default_and_every_profile_open_to_everyone(
    owner_client: Client, conversation: Conversation
) -> None:
    profile("mistral")
    profile("deepseek", model="deepseek-chat", api_key_env="DEEPSEEK_API_KEY")

    html = owner_client.get(settings_url(conversation)).content.decode()

    select = re.search(r'<select name="agent-profile".*?</select>', html, re.DOTALL)
    assert select is not None
    options = re.findall(r"<option[^>]*>([^<]*)</option>", select.group(0))
    assert options == [
        "Server default",
        "deepseek · deepseek-chat",
        "mistral · mistral-small-latest",
    ]
    assert re.search(r'<option value="" selected>Server default', select.group(0))
    assert "is not set on the server" not in html


@pytest.mark.django_db
def test_choosing_a_profile_saves_it_with_the_parameters(
    owner_client: Client, conversation: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MISTRAL_API_KEY", CANARY)
    chosen = profile()

    response = owner_client.post(
        settings_url(conversation), panel_data(**{"agent-profile": chosen.pk})
    )

    assert response.status_code == 302
    conversation.refresh_from_db()
    assert conversation.profile == chosen
    assert conversation.agent_parameters().temperature == 0.5
    html = owner_client.get(settings_url(conversation)).content.decode()
    assert re.search(rf'<option value="{chosen.pk}" selected>mistral', html)
    assert "is not set on the server" not in html and CANARY not in html

    response = owner_client.post(settings_url(conversation), panel_data())
    assert response.status_code == 302
    conversation.refresh_from_db()
    assert conversation.profile is None


@pytest.mark.parametrize(
    "overrides",
    [
        {"agent-temperature": "3"},
        {"pre-0-role": "tool", "pre-0-content": "pretend result"},
        {"agent-max_event_loops": "0"},
    ],
)
@pytest.mark.django_db
def test_invalid_settings_with_a_profile_choice_save_nothing(
    owner_client: Client, conversation: Conversation, overrides: dict[str, Any]
) -> None:
    chosen = profile()
    before = conversation.parameters

    response = owner_client.post(
        settings_url(conversation),
        panel_data(**{"agent-profile": chosen.pk, **overrides}),
        headers={"HX-Request": "true"},
    )

    assert response.status_code == 422
    html = response.content.decode()
    assert 'class="field-error"' in html and "<html" not in html
    assert re.search(rf'<option value="{chosen.pk}" selected>', html), "the choice is kept"
    conversation.refresh_from_db()
    assert conversation.profile is None and conversation.parameters == before


@pytest.mark.django_db
def test_an_unknown_profile_is_refused_and_nothing_saved(
    owner_client: Client, conversation: Conversation
) -> None:
    current = profile()
    conversation.profile = current
    conversation.save()
    before = conversation.parameters

    response = owner_client.post(
        settings_url(conversation),
        panel_data(**{"agent-profile": "9999", "agent-temperature": "1.5"}),
        headers={"HX-Request": "true"},
    )

    assert response.status_code == 422
    assert "Select a valid choice" in response.content.decode()
    conversation.refresh_from_db()
    assert conversation.profile == current and conversation.parameters == before


@pytest.mark.django_db
def test_a_profile_whose_key_is_not_set_is_saved_with_a_warning(
    owner_client: Client, conversation: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    chosen = profile()

    response = owner_client.post(
        settings_url(conversation),
        panel_data(**{"agent-profile": chosen.pk}),
        headers={"HX-Request": "true"},
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "Saved." in html and WARNING in html
    conversation.refresh_from_db()
    assert conversation.profile == chosen
    assert WARNING in owner_client.get(settings_url(conversation)).content.decode()
    monkeypatch.setenv("MISTRAL_API_KEY", CANARY)
    html = owner_client.get(settings_url(conversation)).content.decode()
    assert WARNING not in html and CANARY not in html


@pytest.mark.django_db
def test_the_panel_offers_only_the_profiles_the_user_may_use(
    owner_client: Client, conversation: Conversation
) -> None:
    closed = ProviderProfile.objects.create(
        name="closed", base_url="https://closed.example/v1", model="m"
    )

    html = owner_client.get(settings_url(conversation)).content.decode()

    select = re.search(r'<select name="agent-profile".*?</select>', html, re.DOTALL)
    assert select is not None
    assert re.findall(r"<option[^>]*>([^<]*)</option>", select.group(0)) == ["Server default"]
    response = owner_client.post(
        settings_url(conversation),
        panel_data(**{"agent-profile": closed.pk}),
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 422
    assert "Select a valid choice" in response.content.decode()
    conversation.refresh_from_db()
    assert conversation.profile is None


@pytest.mark.django_db
def test_a_conversation_on_a_profile_the_user_may_no_longer_use_says_so(
    owner_client: Client, conversation: Conversation
) -> None:
    conversation.profile = ProviderProfile.objects.create(
        name="closed", base_url="https://closed.example/v1", model="m"
    )
    conversation.save()

    html = owner_client.get(settings_url(conversation)).content.decode()

    assert "You may no longer use the provider &#x27;closed&#x27;" in html


@pytest.mark.django_db
def test_the_panel_never_tells_whether_a_variable_that_is_not_allowed_exists(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = make.user("root", is_staff=True, is_superuser=True)
    client.force_login(owner)
    chat = make.conversation(owner, "Chat")
    chat.profile = profile(api_key_env="SOMEONES_TOKEN")
    chat.save()

    def warning() -> str:
        html = client.get(settings_url(chat)).content.decode()
        found = re.search(r'<p class="key-warning[^>]*>(.*?)</p>', html, re.DOTALL)
        assert found is not None, "a warning either way"
        return found.group(1)

    monkeypatch.setenv("SOMEONES_TOKEN", CANARY)
    when_set = warning()
    monkeypatch.delenv("SOMEONES_TOKEN")
    assert warning() == when_set
    assert "does not allow" in when_set and "SOMEONES_TOKEN" not in when_set


@pytest.mark.django_db
def test_who_may_use_which_profile() -> None:
    """The permission opens every profile; without it, only those available to everyone."""
    open_one = profile("open")
    closed = profile("closed", available_to_everyone=False)
    plain = make.user("ada")
    granted = make.user("grace")
    granted.user_permissions.add(Permission.objects.get(codename="use_providerprofile"))
    through_a_group = make.user("hal")
    group = Group.objects.create(name="provider users")
    group.permissions.add(Permission.objects.get(codename="use_providerprofile"))
    through_a_group.groups.add(group)
    root = make.user("root", is_staff=True, is_superuser=True)
    editor = make.user("editor", is_staff=True)
    editor.user_permissions.add(Permission.objects.get(codename="change_providerprofile"))

    expected = {
        plain: {open_one},
        editor: {open_one},
        granted: {open_one, closed},
        through_a_group: {open_one, closed},
        root: {open_one, closed},
    }
    for who, usable in expected.items():
        fresh = type(who).objects.get(pk=who.pk)  # no permission cache
        assert set(ProviderProfile.objects.usable_by(fresh)) == usable, who
        one_by_one = {p for p in (open_one, closed) if async_to_sync(p.ausable_by)(fresh)}
        assert one_by_one == usable, who


@pytest.mark.django_db
def test_a_user_with_the_permission_is_offered_every_profile(
    owner_client: Client, conversation: Conversation
) -> None:
    closed = profile("closed", available_to_everyone=False)
    conversation.owner.user_permissions.add(Permission.objects.get(codename="use_providerprofile"))

    response = owner_client.post(
        settings_url(conversation), panel_data(**{"agent-profile": closed.pk})
    )

    assert response.status_code == 302
    conversation.refresh_from_db()
    assert conversation.profile == closed


# A run through a profile --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_run_uses_the_profile_chosen_in_the_panel(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """History from another provider (free-form ids) goes to a Mistral-like server mapped."""
    monkeypatch.setenv("MISTRAL_API_KEY", CANARY)
    fake_openai.checks.append(mistral_rules)
    fake_openai.enqueue(
        tool_turn([("k7Qp2Zx9a", "get_current_time", '{"timezone": "UTC"}')]),
        text_turn("It is noon in UTC."),
    )

    def prepare() -> tuple[Conversation, Any]:
        owner = make.user("ada")
        conversation = make.conversation(owner, "Switch", enabled_tools=["get_current_time"])
        earlier = agent.ToolCall(id="call_from_openai_1", name="get_current_time", arguments="{}")
        transcripts.append_messages(
            conversation,
            [
                agent.ChatMessage(role="user", content="time?"),
                agent.ChatMessage(role="assistant", tool_calls=(earlier,)),
                agent.ChatMessage(role="tool", tool_call_id=earlier.id, content='{"h": 9}'),
                agent.ChatMessage(role="assistant", content="It is nine."),
            ],
        )
        chosen = profile(base_url=fake_openai.base_url)
        client = Client()
        client.force_login(owner)
        response = client.post(
            settings_url(conversation), panel_data(**{"agent-profile": chosen.pk})
        )
        assert response.status_code == 302
        conversation.refresh_from_db()
        return conversation, owner

    conversation, owner = await database_sync_to_async(prepare)()

    handle = await runs.start_run(conversation=conversation, user=owner, content="And now?")
    run = await handle.task

    assert run.status == "completed", run.error
    assert run.model == "mistral-small-latest"
    first, second = (request for request in fake_openai.requests if request.method == "POST")
    assert first.headers["authorization"] == f"Bearer {CANARY}"
    assert "parallel_tool_calls" not in first.body and first.body["tools"]
    sent_ids = [
        call_id
        for request in (first, second)
        for message in request.body["messages"]
        for call_id in [
            *(call["id"] for call in message.get("tool_calls") or ()),
            message.get("tool_call_id"),
        ]
        if call_id
    ]
    assert sent_ids and all(ALNUM9.match(call_id) for call_id in sent_ids)
    assert "k7Qp2Zx9a" in sent_ids and "call_from_openai_1" not in sent_ids
    stored = await database_sync_to_async(transcripts.load_history)(conversation)
    assert stored[1].tool_calls[0].id == "call_from_openai_1", "the transcript keeps its ids"
    assert stored[-1].content == "It is noon in UTC."
    calls = [call async for call in ModelCall.objects.filter(run=run).order_by("step")]
    assert [call.url for call in calls] == [f"{fake_openai.base_url}/chat/completions"] * 2
    assert all(CANARY not in str(call.request) for call in calls)


def test_a_host_without_a_dot_is_a_valid_base_url() -> None:
    from django.core.exceptions import ValidationError as DjangoValidationError

    profile = ProviderProfile(name="compose", base_url="http://vllm:8000/v1", model="m")
    profile.full_clean(validate_unique=False, validate_constraints=False)
    with pytest.raises(DjangoValidationError):
        ProviderProfile(name="bad", base_url="ftp://vllm/v1", model="m").full_clean(
            validate_unique=False, validate_constraints=False
        )
