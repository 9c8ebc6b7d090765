"""Model output and tool logs full of XSS payloads stay inert in a real browser; the CSP is live."""

from __future__ import annotations

import time
from typing import Any

import pytest
from playwright.sync_api import Dialog, Page, expect

from chat import agent, transcripts
from chat.models import Conversation, Run
from chat.testing import factories as make

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PWN = "window.__pwned=1"
DOCUMENT = f"""# Report <script>{PWN}</script>

<img src=x onerror="{PWN};alert(1)">

[click me](javascript:{PWN}) and [mixed case](JaVaScRiPt:alert(1))

<a href="javascript:{PWN}">raw link</a> <svg onload="{PWN}"><circle r="5"/></svg>

<iframe src="javascript:{PWN}"></iframe> <iframe srcdoc="<script>{PWN}</script>"></iframe>

<details open ontoggle="{PWN}">toggle</details> <div onmouseover="{PWN}">hover me</div>

[data link](data:text/html,<script>alert(1)</script>) ![image](javascript:{PWN})

<style>body {{ background: url("javascript:{PWN}") }}</style>

| cell |
|------|
| <img src=x onerror="{PWN}"> |

**bold**, `<script>{PWN}</script>` in code, [top](#top "a title") and [x](#x)
"""
EVIL_NAME = f"<img src=x onerror={PWN}>"
EVIL_ARGUMENTS = f'{{"q": "<script>{PWN}</script>"}}'
EVIL_RESULT = f'{{"html": "<svg onload={PWN}>"}}'
EVIL_ERROR = f'"><img src=x onerror="{PWN}"><script>alert(1)</script>'
EVIL_CALL = agent.ToolCall(id="call_x", name=EVIL_NAME, arguments=EVIL_ARGUMENTS)
EVIL_REASONING = f"<script>{PWN}</script> <img src=x onerror={PWN}> [r](javascript:alert(1))"
LIVE = (
    f'<img src=x onerror="{PWN}"> <script>window.__pwned=2</script> '
    f'[x](javascript:window.__pwned=3) <svg onload="window.__pwned=4"> '
    '<a href="javascript:alert(1)">y</a> <iframe src="javascript:alert(5)"></iframe>'
)

# Elements model output must never become, and attributes it must never carry.
DANGERS = """() => {
  const found = [];
  const transcript = document.getElementById("transcript");
  const never = ["script", "img", "svg", "iframe", "object", "embed", "math", "style", "form"];
  for (const el of transcript.querySelectorAll("*")) {
    const tag = el.tagName.toLowerCase();
    // Our own icons (templates/chat/icon-*.html): nh3 strips any <svg> a model writes; our own
    // edit and annotation forms (templates/chat/conversation.html, annotation.html): the
    // sanitiser keeps no form.
    const own = el.closest(
      "svg.icon[aria-hidden=true], .message.user > form.edit-form, .annotate > form.annotate-form"
    );
    if (never.includes(tag) && !own) found.push(el.outerHTML.slice(0, 80));
    for (const attr of el.attributes) {
      const url = attr.value.replace(/[\\x00-\\x20]/g, "").toLowerCase();
      if (attr.name.startsWith("on") || attr.name === "srcdoc") found.push(tag + " " + attr.name);
      if (/^(javascript|vbscript|data):/.test(url)) found.push(tag + " " + attr.name + "=" + url);
    }
  }
  return {pwned: window.__pwned, found: found};
}"""


def plant(owner: Any) -> Conversation:
    """A completed run whose every displayed field carries payloads; its tool call failed."""
    conversation = make.new_conversation(owner, title=f"</title><script>{PWN}</script>")
    run = Run.objects.create(
        conversation=conversation, created_by=owner, status="completed", steps=2, duration=0.4
    )
    _, asking, _, _ = transcripts.append_messages(
        conversation,
        [
            agent.ChatMessage(role="user", content=f"<img src=x onerror={PWN}> write a report"),
            agent.ChatMessage(
                role="assistant",
                reasoning=EVIL_REASONING,
                tool_calls=(EVIL_CALL,),
            ),
            agent.ChatMessage(role="tool", tool_call_id="call_x", content=EVIL_RESULT),
            agent.ChatMessage(role="assistant", content=DOCUMENT, reasoning=EVIL_REASONING),
        ],
        run=run,
    )
    make.tool_log(run, asking, EVIL_CALL, EVIL_RESULT, step=1, error=EVIL_ERROR).save()
    return conversation


def arm(page: Page) -> list[str]:
    """Payloads set window.__pwned or open a dialog: start at 0, record every dialog."""
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.add_init_script("window.__pwned = 0")
    page.on("dialog", dismiss)
    return dialogs


def open_conversation(page: Page, base: str, conversation: Conversation) -> str:
    url = f"{base}/c/{conversation.pk}/"
    page.goto(url)
    page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=10000)
    return url


def assert_inert(page: Page, dialogs: list[str]) -> None:
    state = page.evaluate(DANGERS)
    assert state == {"pwned": 0, "found": []}
    assert dialogs == []
    assert "<script" not in page.locator("#transcript").inner_html().lower()


def test_stored_payloads_stay_inert_and_the_csp_blocks_inline_script(
    page: Page, live_server_url: str, login: Any
) -> None:
    conversation = plant(login())
    dialogs = arm(page)
    url = open_conversation(page, live_server_url, conversation)

    reply = page.locator(".message.assistant .text")
    expect(reply).to_contain_text(f"<script>{PWN}</script>")  # raw HTML shown as text
    expect(reply).to_contain_text(f"[click me](javascript:{PWN})")
    assert page.title().startswith(f"</title><script>{PWN}</script>")
    links = reply.locator("a")
    assert links.count() == 2
    for index in range(links.count()):
        link = links.nth(index)
        assert not (link.get_attribute("href") or "").lower().startswith("javascript:")
        link.click()
        assert page.url.split("#")[0] == url
    reasoning = page.locator(".message.assistant details.reasoning")
    reasoning.locator("summary").click()
    expect(reasoning).to_have_attribute("open", "")
    expect(reasoning).to_contain_text(EVIL_REASONING)
    pill = page.locator(".message.assistant .pill")
    pill.hover()
    expect(pill).to_have_text(agent.humanize(EVIL_NAME))
    expect(pill).to_have_attribute("title", EVIL_ERROR)
    page.locator(".message.user .bubble").hover()
    assert_inert(page, dialogs)

    # The policy is live: a script element made in the page does not run, and says why.
    blocked = page.evaluate(
        """() => new Promise(resolve => {
          const violations = [];
          document.addEventListener("securitypolicyviolation",
            event => violations.push(event.effectiveDirective));
          const script = document.createElement("script");
          script.textContent = "window.__pwned = 3";
          document.body.appendChild(script);
          const button = document.createElement("button");
          button.setAttribute("onclick", "window.__pwned = 4");
          document.body.appendChild(button);
          button.click();
          setTimeout(() => resolve({pwned: window.__pwned, violations}), 200);
        })"""
    )
    assert blocked["pwned"] == 0
    assert "script-src-elem" in blocked["violations"]
    assert "script-src-attr" in blocked["violations"]
    # And the checks above can fail: they see an injected handler and a dialog.
    page.evaluate(
        """() => document.getElementById("transcript")
          .insertAdjacentHTML("beforeend", '<img src="x" onerror="window.__pwned = 5">')"""
    )
    assert page.evaluate(DANGERS)["found"] == [
        '<img src="x" onerror="window.__pwned = 5">',
        "img onerror",
    ]
    page.evaluate("alert('probe')")
    assert dialogs == ["probe"]


def test_a_live_reply_echoing_payloads_stays_inert_while_streaming_and_after(
    page: Page, live_server_url: str, login: Any
) -> None:
    conversation = make.new_conversation(login())
    dialogs = arm(page)
    open_conversation(page, live_server_url, conversation)

    page.fill("#message", LIVE)
    page.keyboard.press("Enter")
    seen_streaming = 0
    deadline = time.monotonic() + 10
    footer = page.locator(".message.assistant .reply-footer")
    while footer.count() == 0 and time.monotonic() < deadline:
        state = page.evaluate(DANGERS)
        assert state == {"pwned": 0, "found": []}
        seen_streaming += page.locator(".message.assistant.streaming .live-text").count()
        time.sleep(0.03)
    assert seen_streaming, "the reply was never seen streaming"
    expect(footer).to_be_visible()

    reply = page.locator(".message.assistant .text")
    expect(reply).to_contain_text("You said: “<img src=x onerror=")
    expect(reply).to_contain_text("<script>window.__pwned=2</script>")
    expect(page.locator(".message.user .bubble")).to_contain_text(LIVE)
    assert_inert(page, dialogs)
