"""The browser probe: Debian's chromium through Playwright, timing what the page shows.

A MutationObserver injected before any page script records, in page time (performance.now()),
the Enter key press on the composer (time zero), the first streamed text in the reply's `.text`
(its rendered blocks and the one being written), every later growth of that text (to see
stutter), and the finished reply's footer. Each sample is a fresh conversation in a fresh page;
the direct client runs right before each scenario with the same reply length and pace.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench.direct import DirectReply, stream_reply
from bench.provider import ReplySpec
from bench.stats import check_tokens
from chat.testing.browser import CHROMIUM, CHROMIUM_ARGS

OBSERVER = """
(() => {
  const b = window.__bench = {t0: null, first: null, firstFrame: null, done: null,
                              doneFrame: null, updates: [], length: 0};
  // Where the time goes: the frame leaving the page, each frame's arrival (event.timeStamp) and
  // the moment htmx is done with it (a listener registered after htmx's own).
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (data) {
    if (b.t0 !== null && b.sent === undefined) {
      b.sent = performance.now();
      b.frames = [];
      this.addEventListener("message", (event) => {
        b.frames.push([event.timeStamp, performance.now(),
                       /-(text|done)" hx-swap-oob=/.test(String(event.data))]);
      });
    }
    return send.call(this, data);
  };
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target && event.target.id === "message" && b.t0 === null) {
      b.t0 = performance.now();
    }
  }, true);
  new MutationObserver(() => {
    if (b.t0 === null || b.done !== null) return;
    const now = performance.now();
    const live = document.querySelector(".message.assistant.streaming .text");
    if (live && live.textContent.length > b.length) {
      b.length = live.textContent.length;
      b.updates.push(now);
      if (b.first === null) {
        b.first = now;
        requestAnimationFrame(() => { b.firstFrame = performance.now(); });
      }
    }
    if (document.querySelector(".message.assistant:not(.streaming) .reply-footer")) {
      b.done = now;
      if (b.first === null) b.first = now;
      requestAnimationFrame(() => { b.doneFrame = performance.now(); });
    }
  }).observe(document, {subtree: true, childList: true, characterData: true});
})();
"""

# A reader types for seconds: the key is pressed once the page has painted, its main thread has
# been idle, and a second has passed (on a 2-CPU machine chromium was still busy loading this
# page and closing the last one 300 ms after the socket opened, and the server felt it).
SETTLE = """() => new Promise((resolve) =>
  requestAnimationFrame(() => requestAnimationFrame(() =>
    requestIdleCallback(() => setTimeout(resolve, 1000)))))"""


@dataclass
class Scenario:
    tokens: int
    pace_ms: float
    samples: int
    tools: int = 0

    def spec(self) -> ReplySpec:
        return ReplySpec(
            tag=uuid.uuid4().hex[:10], tokens=self.tokens, pace_ms=self.pace_ms, tools=self.tools
        )


@dataclass
class ScreenSample:
    """One reply as the page showed it, in ms from the Enter key press."""

    first: float | None = None
    first_frame: float | None = None
    done: float | None = None
    done_frame: float | None = None
    gaps: list[float] = field(default_factory=list)
    # The first token's way: Enter -> frame sent -> first text frame arrives -> htmx is done.
    sent: float | None = None
    first_arrival: float | None = None
    first_handled: float | None = None
    updates: int = 0
    tokens_ok: bool = False
    token_check: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def _direct_baseline(host: str, port: int, scenario: Scenario, count: int) -> list[DirectReply]:
    async def run() -> list[DirectReply]:
        replies = []
        for _ in range(count):
            replies.append(await stream_reply(host, port, scenario.spec()))
        return replies

    # Sync Playwright owns this thread's event loop: the direct client gets a thread of its own.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run()).result()


def probe(
    *,
    server_url: str,
    session: str,
    conversations: list[int],
    scenarios: list[Scenario],
    provider_host: str,
    provider_port: int,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run every scenario; returns, per scenario, the direct and on-screen samples."""
    from playwright.sync_api import sync_playwright

    results = []
    remaining = list(conversations)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": session, "url": server_url}])
        context.add_init_script(OBSERVER)
        warm = context.new_page()  # the first page load pays for chromium's own start-up
        warm.goto(f"{server_url}/c/{remaining[0]}/")
        warm.close()
        for scenario in scenarios:
            tools = f" after {scenario.tools} tool round(s)" if scenario.tools else ""
            log(f"browser: {scenario.tokens} tokens at {scenario.pace_ms:g} ms/token{tools}")
            direct = _direct_baseline(provider_host, provider_port, scenario, scenario.samples)
            screen = []
            for _ in range(scenario.samples):
                spec = scenario.spec()
                screen.append(_sample(context, server_url, remaining.pop(0), spec))
            results.append({"scenario": scenario, "direct": direct, "screen": screen})
        context.close()
        browser.close()
    return results


def _sample(context: Any, server_url: str, conversation: int, spec: ReplySpec) -> ScreenSample:
    sample = ScreenSample()
    page = context.new_page()
    try:
        page.goto(f"{server_url}/c/{conversation}/")
        page.locator('[ws-connect][data-socket="open"]').wait_for(timeout=15000)
        page.fill("#message", spec.prompt())
        # Playwright installs its helper script in the page's world on the first wait_for_function
        # (~15 ms of the page's main thread): do it now, not in the middle of the measurement.
        page.wait_for_function("() => true")
        page.evaluate(SETTLE)
        page.keyboard.press("Enter")
        timeout = 30000 + spec.tokens * spec.pace_ms * 2
        # Poll on a timer, not on every animation frame: the probe must not load the page.
        done = "() => window.__bench.done !== null && window.__bench.doneFrame !== null"
        page.wait_for_function(done, timeout=timeout, polling=100)
        data = page.evaluate("() => window.__bench")
        t0 = data["t0"]
        sample.first = data["first"] - t0
        sample.first_frame = data["firstFrame"] - t0 if data["firstFrame"] else None
        sample.done = data["done"] - t0
        sample.done_frame = data["doneFrame"] - t0
        if data.get("sent") is not None:
            sample.sent = data["sent"] - t0
            text_frames = [frame for frame in data["frames"] if frame[2]]
            if text_frames:
                sample.first_arrival = text_frames[0][0] - t0
                sample.first_handled = text_frames[0][1] - t0
        updates = data["updates"]
        sample.updates = len(updates)
        sample.gaps = [b - a for a, b in itertools.pairwise(updates)]
        text = page.inner_text(".message.assistant:not(.streaming) .text")
        check = check_tokens(" ".join(text.split()), spec.tokens)
        sample.tokens_ok = check.ok
        sample.token_check = check.as_dict()
    except Exception as exc:  # a sample that fails is reported, not fatal
        sample.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        page.close()
    return sample
