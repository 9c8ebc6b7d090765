// Agent Lab: the little the page needs beyond htmx. No inline handlers (the CSP forbids them).
(function () {
  "use strict";

  function composer() { return document.getElementById("composer"); }

  // Called after every socket frame: touch the composer only when the run state changed, so a
  // streamed text frame costs no style work here.
  var shownRunning = null;
  var shownWaiting = null;
  function applyRunState() {
    var state = document.getElementById("run-state");
    var form = composer();
    if (!state || !form) return;
    var running = state.dataset.running === "true";
    // A run that waits for a decision: Stop ends it; Send stays, and the server says why not.
    var waiting = !!state.dataset.waiting;
    var box = document.getElementById("message");
    if (running === shownRunning && waiting === shownWaiting && box && box.disabled === running) return;
    shownRunning = running;
    shownWaiting = waiting;
    form.querySelectorAll("textarea, button").forEach(function (el) { el.disabled = running; });
    // Edit, regenerate and switching wait for the run; a version step at an end stays disabled.
    document.querySelectorAll(".transcript [data-idle]").forEach(function (el) {
      el.disabled = running || waiting || el.hasAttribute("data-end");
    });
    var stop = document.getElementById("stop");
    if (stop) stop.hidden = !running && !waiting;
    if (!running && box && document.activeElement === document.body) box.focus();
  }

  // Keep the newest text in view while streaming, unless the reader has scrolled up.
  var stick = true;
  function nearBottom() {
    var doc = document.documentElement;
    return doc.scrollHeight - window.scrollY - window.innerHeight < 80;
  }
  window.addEventListener("scroll", function () { stick = nearBottom(); }, { passive: true });

  document.addEventListener("DOMContentLoaded", function () {
    applyRunState();
    var transcript = document.getElementById("transcript");
    if (transcript) {
      // Scroll once per animation frame, when the browser lays out anyway: scrolling inside the
      // observer forced a layout for every frame the socket delivered.
      var scrollPending = false;
      new MutationObserver(function () {
        var hint = document.getElementById("empty-hint");
        if (hint && transcript.children.length) hint.remove();
        if (!stick || scrollPending || transcript.hidden) return;
        scrollPending = true;
        requestAnimationFrame(function () {
          scrollPending = false;
          if (stick) window.scrollTo(0, document.documentElement.scrollHeight);
        });
      }).observe(transcript, { childList: true, subtree: true, characterData: true });
      // A link to a message (#message-N) lands on it; the latest window opens at the bottom.
      var linked = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (linked) { stick = false; linked.scrollIntoView(); }
      else if (!transcript.hidden) window.scrollTo(0, document.documentElement.scrollHeight);
    }
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  });

  // Enter sends, Shift+Enter adds a line; in an edit, Escape cancels. Delegated: the server
  // replaces the composer and the turns.
  document.addEventListener("keydown", function (event) {
    var box = event.target;
    if (!box || box.tagName !== "TEXTAREA") return;
    var form = box.id === "message" ? composer() : box.closest(".edit-form");
    if (!form) return;
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if ((box.value.trim() || form.querySelector("#attach-chips > li")) && !box.disabled) form.requestSubmit();
    } else if (event.key === "Escape" && form !== composer()) {
      event.preventDefault();
      closeEdit(form);
    }
  });

  function text(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (response) {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.text();
    });
  }

  function say(message) {
    var notice = document.getElementById("notice");
    if (notice) { notice.textContent = message; notice.classList.add("notice-error"); }
  }

  // Edit in place: the bubble becomes the message's whole text in a form sent over the socket.
  function openEdit(button) {
    var message = button.closest(".message");
    var form = message.querySelector(".edit-form");
    text(button.dataset.textUrl).then(function (value) {
      var box = form.querySelector("textarea");
      box.value = value;
      message.classList.add("editing");
      form.hidden = false;
      box.focus();
      box.setSelectionRange(value.length, value.length);
    }).catch(function () { say("The message could not be loaded for editing: reload the page."); });
  }

  function closeEdit(form) {
    var message = form.closest(".message");
    form.hidden = true;
    message.classList.remove("editing");
    var edit = message.querySelector("[data-edit]");
    if (edit) edit.focus();
  }

  // Copy takes the raw Markdown from the server; the button says it was copied.
  function copy(button, source) {
    var label = button.textContent;
    function done(word) {
      button.textContent = word;
      setTimeout(function () { button.textContent = label; }, 1500);
    }
    var written;
    if (button.dataset.copyUrl && window.ClipboardItem && navigator.clipboard.write) {
      // The item takes a promise, so the copy keeps the click's user activation.
      var blob = text(button.dataset.copyUrl).then(function (value) {
        return new Blob([value], { type: "text/plain" });
      });
      written = navigator.clipboard.write([new ClipboardItem({ "text/plain": blob })]);
    } else if (button.dataset.copyUrl) {
      written = text(button.dataset.copyUrl).then(function (value) {
        return navigator.clipboard.writeText(value);
      });
    } else {
      written = navigator.clipboard.writeText(source.textContent);
    }
    written.then(function () { done("Copied"); }, function () { done("Not copied"); });
  }
  // Copy buttons: data-copy names the element whose text is copied (the wire inspector),
  // data-copy-url the raw text's address (messages).
  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target : null;
    if (!target) return;
    var button = target.closest("[data-copy], [data-copy-url]");
    if (button && navigator.clipboard) {
      var source = button.dataset.copy ? document.querySelector(button.dataset.copy) : null;
      if (button.dataset.copyUrl || source) copy(button, source);
      return;
    }
    var code = target.closest("[data-copy-code]");
    if (code && navigator.clipboard) {
      copy(code, code.closest(".code-block").querySelector("pre code"));
      return;
    }
    var close = target.closest("[data-tool-close]");
    if (close) { closeTool(close.closest(".tool-panel"), true); return; }
    var edit = target.closest("[data-edit]");
    if (edit) { openEdit(edit); return; }
    var cancel = target.closest("[data-edit-cancel]");
    if (cancel) closeEdit(cancel.closest(".edit-form"));
  });
  // Tool pills open their call's details in the reply's panel (htmx loads them); a second
  // press, or Close, closes it again.
  function closeTool(panel, refocus) {
    if (!panel) return;
    var open = document.querySelector('[data-tool-pill][aria-controls="' + panel.id + '"][aria-expanded="true"]');
    panel.hidden = true;
    panel.textContent = "";
    if (open) {
      open.setAttribute("aria-expanded", "false");
      if (refocus) open.focus();
    }
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    var pill = event.detail.elt;
    if (!pill || !pill.hasAttribute || !pill.hasAttribute("data-tool-pill")) return;
    var panel = document.getElementById(pill.getAttribute("aria-controls"));
    var wasOpen = pill.getAttribute("aria-expanded") === "true";
    closeTool(panel, false);
    if (wasOpen) { event.preventDefault(); return; }
    pill.setAttribute("aria-expanded", "true");
    if (panel) panel.hidden = false;
  });
  // Times: relative ("5 minutes ago"), kept current; exact in the reader's time zone on hover
  // and focus.
  var relative = window.Intl && Intl.RelativeTimeFormat ? new Intl.RelativeTimeFormat(undefined, { numeric: "auto" }) : null;
  var exact = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  var units = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400], ["hour", 3600], ["minute", 60]];
  function ago(date) {
    var seconds = (date.getTime() - Date.now()) / 1000;
    if (Math.abs(seconds) < 45) return "just now";
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(seconds) >= units[i][1] || units[i][0] === "minute") {
        return relative.format(Math.round(seconds / units[i][1]), units[i][0]);
      }
    }
  }
  function times(root) {
    if (!relative) return;
    (root || document).querySelectorAll("time.when").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date)) return;
      el.textContent = ago(date);
      el.title = el.dataset.exact = exact.format(date);
    });
  }
  setInterval(times, 60000);

  // The Details toggle of replies remembers the reader's choice for new replies and pages.
  var DETAILS = "agentlab.details";
  function remembered(root) {
    var open = false;
    try { open = localStorage.getItem(DETAILS) === "open"; } catch (e) { /* storage off */ }
    (root || document).querySelectorAll("details[data-remember]").forEach(function (el) { el.open = open; });
  }
  document.addEventListener("toggle", function (event) {
    var el = event.target;
    if (!el.matches || !el.matches("details[data-remember]") || !event.isTrusted) return;
    try { localStorage.setItem(DETAILS, el.open ? "open" : "closed"); } catch (e) { /* storage off */ }
  }, true);
  document.addEventListener("DOMContentLoaded", function () { times(); remembered(); });
  document.addEventListener("htmx:load", function (event) { times(event.target); remembered(event.target); });
  document.addEventListener("htmx:wsAfterSend", function (event) {
    if (event.target && event.target.id === "composer") stick = true;
  });
  document.addEventListener("htmx:wsAfterMessage", applyRunState);
  document.addEventListener("htmx:wsAfterMessage", versionShown);

  // "Show earlier messages": the window before comes in above, and what the reader sees stays
  // where it was (the turn below the button keeps its place on screen).
  var kept = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var form = event.detail.target;
    if (!form || !form.matches || !form.matches("[data-earlier]")) return;
    var below = form.nextElementSibling;
    kept = below ? { el: below, top: below.getBoundingClientRect().top } : null;
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (!kept) return;
    var was = kept;
    kept = null;
    window.scrollBy(0, was.el.getBoundingClientRect().top - was.top);
    var next = was.el.parentElement && was.el.parentElement.querySelector("[data-earlier] button");
    var first = next || was.el.parentElement.querySelector(".turn");
    if (first && !next) first.setAttribute("tabindex", "-1");
    if (first) first.focus({ preventScroll: true });
    shownRunning = null;  // the buttons that came wait for a run like the others
    applyRunState();
  });

  // A version made or shown from this tab (switch, edit, regenerate at message N): once the
  // transcript is re-rendered, message N keeps its place on screen; when the window shown no
  // longer holds it (an older window, or one further back), the page opens the one that does.
  // A message sent from an older window opens the latest, where its reply streams.
  var asked = null;
  document.addEventListener("htmx:wsAfterSend", function (event) {
    var frame;
    try { frame = JSON.parse(event.detail.message); } catch (e) { return; }
    var sink = document.getElementById("transcript");
    if (!sink) return;
    if (frame.action === "send" && sink.hidden) {  // an older window: the reply comes at the end
      asked = { index: null, first: sink.firstElementChild, top: null };
      return;
    }
    if (["switch", "edit", "regenerate"].indexOf(frame.action) < 0) return;
    var index = parseInt(frame.index, 10);
    if (isNaN(index)) return;
    var shown = document.getElementById("message-" + index);
    asked = { index: index, first: sink.firstElementChild, top: shown ? shown.getBoundingClientRect().top : null };
  });
  function versionShown() {
    var sink = document.getElementById("transcript");
    if (!asked || !sink || sink.firstElementChild === asked.first) return;
    var was = asked;
    asked = null;
    var shown = sink.hidden ? null : document.getElementById("message-" + was.index);
    if (was.index === null) {
      location.assign(location.pathname);
    } else if (!shown) {
      location.assign(location.pathname + "?at=" + was.index + "#message-" + was.index);
    } else if (was.top !== null) {
      window.scrollBy(0, shown.getBoundingClientRect().top - was.top);
    }
  }
  document.addEventListener("htmx:wsOpen", function (event) { event.target.dataset.socket = "open"; });
  document.addEventListener("htmx:wsClose", function (event) { event.target.dataset.socket = "closed"; });
})();

// Theme, keyboard shortcuts, the phone drawer and the connection banner.
(function () {
  "use strict";

  // Theme: system, light or dark, kept in a cookie so the server draws the page in it.
  document.addEventListener("change", function (event) {
    var choice = event.target;
    if (!choice.matches || !choice.matches("[data-theme-choice]")) return;
    document.documentElement.dataset.theme = choice.value;
    document.cookie = "theme=" + choice.value + "; path=/; max-age=31536000; SameSite=Lax";
  });

  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }

  function drawer(open) {
    var toggle = document.querySelector("[data-drawer]");
    var backdrop = document.querySelector("[data-drawer-close]");
    if (!toggle) return;
    document.body.classList.toggle("drawer-open", open);
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
    if (backdrop) backdrop.hidden = !open;
    if (open) {
      var first = document.querySelector("#sidebar a, #sidebar input, #sidebar button");
      if (first) first.focus();
    } else if (document.activeElement && document.activeElement.closest("#sidebar")) {
      toggle.focus();
    }
  }

  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target : null;
    if (!target) return;
    if (target.closest("[data-drawer]")) {
      drawer(!document.body.classList.contains("drawer-open"));
    } else if (target.closest("[data-drawer-close]")) {
      drawer(false);
    } else if (target.closest("[data-shortcuts]")) {
      var list = document.getElementById("shortcuts");
      if (list && !list.open) list.showModal();
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.isComposing) return;
    var mod = event.ctrlKey || event.metaKey;
    if (mod && event.shiftKey && (event.key === "O" || event.key === "o")) {
      var create = document.querySelector('form[action$="/c/new/"]');
      if (create) { event.preventDefault(); create.requestSubmit(); }
      return;
    }
    if (event.key === "Escape") {
      if (document.body.classList.contains("drawer-open")) { drawer(false); return; }
      if (document.querySelector("dialog[open]")) return;  // the dialog closes itself
      var target = event.target;
      if (target && target.closest && target.closest(".edit-form, [role=search], .picker")) return;
      var stop = document.getElementById("stop");
      var state = document.getElementById("run-state");
      if (state && state.dataset.waiting) return;  // a waiting run ends by Stop alone, not Escape
      if (stop && !stop.hidden && !stop.disabled) { event.preventDefault(); stop.click(); }
      return;
    }
    if (event.key === "?" && !mod && !typing(event.target)) {
      var list = document.getElementById("shortcuts");
      if (list && !list.open) { event.preventDefault(); list.showModal(); }
    }
  });

  // The connection banner sits by the composer; Send waits while the socket is down.
  function connection(open) {
    var banner = document.querySelector(".connection-banner");
    var send = document.getElementById("send");
    var state = document.getElementById("run-state");
    if (banner) banner.hidden = open;
    if (send) send.disabled = !open || (state && state.dataset.running === "true");
  }
  document.addEventListener("htmx:wsOpen", function () { connection(true); });
  document.addEventListener("htmx:wsClose", function () { connection(false); });
})();

// Sidebar search: Ctrl+K (Cmd+K) focuses it from anywhere, the composer too, opening the phone
// drawer if need be; Escape clears it and brings the list back; the arrow keys move between the
// box and the results; Enter opens the first result once the results are those of what the box
// says. Listens in the capture phase, so a key the search used (Escape) reaches the page's other
// shortcuts as handled: Escape in a search that has text clears it, and closes nothing.
(function () {
  "use strict";

  function box() { return document.getElementById("conversation-search"); }
  function links() {
    var list = document.getElementById("conversation-results");
    return list ? Array.prototype.slice.call(list.querySelectorAll("a[href]")) : [];
  }
  function words(value) { return value.trim().split(/\s+/).join(" "); }

  document.addEventListener("DOMContentLoaded", function () {
    var hint = document.querySelector(".search-shortcut");
    if (hint && /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent)) hint.textContent = "⌘ K";
  });
  // New results start at the top, not where the reader had scrolled the list to.
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "conversation-results") event.detail.target.scrollTop = 0;
  });

  document.addEventListener("keydown", function (event) {
    var input = box();
    var key = event.key || "";
    if (!input || event.defaultPrevented || event.isComposing) return;
    if ((event.ctrlKey || event.metaKey) && !event.altKey && !event.shiftKey && key.toLowerCase() === "k") {
      event.preventDefault();
      var toggle = document.querySelector("[data-drawer]");
      if (getComputedStyle(input).visibility !== "visible" && toggle) toggle.click();
      input.focus();
      input.select();
      return;
    }
    if (event.target === input) {
      var first = links()[0];
      if (key === "Escape" && input.value) {
        event.preventDefault();
        input.value = "";
        // The box's own trigger ("input changed") fetches the whole list again.
        input.dispatchEvent(new Event("input", { bubbles: true }));
      } else if (key === "ArrowDown" && first) {
        event.preventDefault();
        first.focus();
      } else if (key === "Enter" && first) {
        var results = document.querySelector("#conversation-results .search-results");
        if (results && results.dataset.query === words(input.value)) {
          event.preventDefault();
          first.click();
        }
      }
      return;
    }
    var all = links();
    var at = all.indexOf(event.target);
    if (at < 0) return;
    if (key === "ArrowDown" && at + 1 < all.length) {
      event.preventDefault();
      all[at + 1].focus();
    } else if (key === "ArrowUp") {
      event.preventDefault();
      (at === 0 ? input : all[at - 1]).focus();
    } else if (key === "Escape") {
      event.preventDefault();
      input.focus();
    }
  }, true);
})();

// Model picker in the conversation header: a disclosure whose panel htmx loads on opening;
// Escape closes it and gives the focus back to its button. A listed model fills the Model field;
// typing filters the list. The model field's placeholder follows the provider (the picker and
// the settings page), and the settings page's "Saved" goes once the panel is edited again.
(function () {
  "use strict";

  function picker() { return document.getElementById("model-picker"); }
  function parts(root) {
    return {
      toggle: root.querySelector("[data-picker-toggle]"),
      panel: root.querySelector(".model-popover"),
      box: root.querySelector("[data-model-input]")
    };
  }

  function open(root) {
    var p = parts(root);
    p.panel.hidden = false;
    p.toggle.setAttribute("aria-expanded", "true");
    p.panel.textContent = "Loading…";
    htmx.trigger(p.panel, "picker-open");
  }

  function close(root, refocus) {
    var p = parts(root);
    if (p.panel.hidden) return;
    p.panel.hidden = true;
    p.toggle.setAttribute("aria-expanded", "false");
    if (refocus) p.toggle.focus();
  }

  function mark(root) {
    var box = parts(root).box;
    var value = box ? box.value.trim() : "";
    root.querySelectorAll("[data-pick-model]").forEach(function (option) {
      option.setAttribute("aria-pressed", option.dataset.pickModel === value ? "true" : "false");
    });
  }

  function filter(root) {
    var text = parts(root).box.value.trim().toLowerCase();
    root.querySelectorAll("[data-pick-model]").forEach(function (option) {
      option.parentElement.hidden = !!text && option.dataset.pickModel.toLowerCase().indexOf(text) < 0;
    });
  }

  function placeholder(select) {
    var field = document.getElementById(select.dataset.modelField || "");
    var defaults;
    try { defaults = JSON.parse(select.dataset.defaultModels); } catch (e) { return; }
    if (field && typeof defaults[select.value] === "string") field.placeholder = defaults[select.value];
    // A target that brings its own model (an agent version): nothing to type beside it.
    var own = select.dataset.ownModel;
    if (field && own) field.disabled = select.value.indexOf(own) === 0;
  }

  function settingsEdited(target) {
    if (!target.closest || !target.closest("#settings-panel")) return;
    var status = document.getElementById("settings-status");
    if (status) status.textContent = "";
  }

  document.addEventListener("click", function (event) {
    var root = picker();
    var target = event.target.closest ? event.target : null;
    if (!root || !target) return;
    if (target.closest("[data-picker-toggle]")) {
      if (parts(root).panel.hidden) open(root); else close(root, false);
      return;
    }
    var option = target.closest("[data-pick-model]");
    if (option && root.contains(option)) {
      var box = parts(root).box;
      box.value = option.dataset.pickModel;
      mark(root);
      box.focus();
      return;
    }
    if (!root.contains(target)) close(root, false);
  });

  document.addEventListener("keydown", function (event) {
    var root = picker();
    if (event.key !== "Escape" || event.isComposing || !root || parts(root).panel.hidden) return;
    event.preventDefault();
    close(root, true);
  }, true);  // capture: before the page's own Escape (which would stop a run)

  document.addEventListener("input", function (event) {
    var root = picker();
    var target = event.target;
    if (root && target.matches && target.matches("[data-model-input]") && root.contains(target)) {
      filter(root);
      mark(root);
    }
    settingsEdited(target);
  });

  document.addEventListener("change", function (event) {
    var target = event.target;
    settingsEdited(target);
    if (!target.matches || !target.matches("select[data-default-models]")) return;
    placeholder(target);
    var field = document.getElementById(target.dataset.modelField || "");
    if (field && field.disabled) field.value = "";
    var root = picker();
    // Another provider: the model typed for the last one is not meant for it.
    if (root && root.contains(target) && parts(root).box) parts(root).box.value = "";
  });

  document.addEventListener("htmx:load", function (event) {
    var el = event.target;
    if (!el || !el.querySelectorAll) return;
    if (el.matches("select[data-default-models]")) placeholder(el);
    el.querySelectorAll("select[data-default-models]").forEach(placeholder);
    var root = picker();
    if (root && root.contains(el)) mark(root);
  });
})();

// Annotations (templates/chat/annotation.html): the Note disclosure opens and closes its panel,
// Escape in it closes it (and stops no run); a block the server pushed to every socket carries
// no CSRF token, so its requests take the page's; a saved block gives the focus back.
(function () {
  "use strict";

  function panelOf(toggle) { return document.getElementById(toggle.getAttribute("aria-controls")); }

  function show(toggle, open) {
    var panel = panelOf(toggle);
    if (!panel) return;
    panel.hidden = !open;
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
    if (open) {
      var box = panel.querySelector("textarea");
      if (box) box.focus();
    } else {
      toggle.focus();
    }
  }

  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target : null;
    var toggle = target && target.closest("[data-annotate-toggle]");
    if (toggle) show(toggle, toggle.getAttribute("aria-expanded") !== "true");
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.isComposing || !event.target.closest) return;
    var panel = event.target.closest(".annotate-panel");
    if (!panel) return;
    var toggle = document.querySelector('[data-annotate-toggle][aria-controls="' + panel.id + '"]');
    event.preventDefault();
    if (toggle) show(toggle, false);
  }, true);  // capture: before the page's own Escape (which would stop a run)

  function token() {
    var field = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (field && field.value) return field.value;
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  document.addEventListener("htmx:configRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || !elt.closest || !elt.closest(".annotate") || event.detail.verb === "get") return;
    if (!event.detail.headers["X-CSRFToken"]) event.detail.headers["X-CSRFToken"] = token();
  });

  // After a save the reader's button is back in the new block (htmx keeps the focus by id),
  // unless it was Save or Clear in the closed panel: then the Note button takes it.
  var saving = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    var block = elt && elt.closest && !elt.closest("[data-case-form]") ? elt.closest(".annotate") : null;
    if (block && event.detail.requestConfig.verb !== "get") saving = block.id;
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    var block = event.target;
    if (!saving || !block || block.id !== saving) return;
    saving = null;
    var active = document.activeElement;
    if (active && active !== document.body && document.contains(active) && active.offsetParent !== null) return;
    var toggle = block.querySelector("[data-annotate-toggle]");
    if (toggle) toggle.focus();
  });
})();

// Saving a case (templates/chat/case_form.html): "Save as case" opens its form where it is (htmx
// loads it into the slot it controls) and a second press closes it; Cancel and Escape close it
// and give the focus back to the button (Escape stops no run); typing a tool or arguments
// chooses "Another call". A refused form puts the focus on the field it names.
(function () {
  "use strict";

  function openerOf(slot) {
    return document.querySelector('[data-case-open][aria-controls="' + slot.id + '"]');
  }

  function close(slot, refocus) {
    if (!slot) return;
    slot.hidden = true;
    slot.textContent = "";
    var opener = openerOf(slot);
    if (!opener) return;
    opener.setAttribute("aria-expanded", "false");
    if (refocus) opener.focus();
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var button = event.detail.elt;
    if (!button || !button.hasAttribute || !button.hasAttribute("data-case-open")) return;
    var slot = document.getElementById(button.getAttribute("aria-controls"));
    if (button.getAttribute("aria-expanded") === "true") {
      event.preventDefault();
      close(slot, false);
      return;
    }
    button.setAttribute("aria-expanded", "true");
    if (slot) slot.hidden = false;
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var slot = event.detail.target;
    if (!slot || !slot.classList || !slot.classList.contains("case-slot")) return;
    var form = slot.querySelector("[data-case-form]");
    var focus;
    // Whoever is already typing in the form keeps their place.
    if (form && form.contains(document.activeElement)) return;
    if (form) {
      focus = form.querySelector('[aria-invalid="true"]')
        || (form.querySelector("[role=alert]") && form.querySelector("[type=submit]"))
        || form.querySelector("input:not([type=hidden])");
    } else {
      focus = openerOf(slot);
    }
    if (focus) focus.focus();
  });

  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target : null;
    var cancel = target && target.closest("[data-case-close]");
    if (cancel) close(cancel.closest(".case-slot"), true);
  });

  document.addEventListener("input", function (event) {
    var field = event.target;
    if (!field.matches || !field.matches("[data-case-other]")) return;
    var choice = field.closest("[data-case-form]").querySelector("[data-case-other-choice]");
    if (choice) choice.checked = true;
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.isComposing || !event.target.closest) return;
    var slot = event.target.closest(".case-slot");
    if (!slot) return;
    event.preventDefault();
    close(slot, true);
  }, true);  // capture: before the page's own Escape (which would stop a run)
})();

// The sidebar's lists load their next page as they scroll (chat/sidebar.py). Whoever reached
// "Show more" by keyboard goes on from the first conversation that came, not from the top.
(function () {
  "use strict";

  var pending = null;  // the list whose "Show more" had the focus, and how many links it had

  document.addEventListener("htmx:beforeSwap", function (event) {
    var more = event.detail.target;
    if (!more || !more.classList || !more.classList.contains("sidebar-more")) return;
    if (!more.contains(document.activeElement)) return;
    var list = more.closest("nav, .conversations-page");
    if (list) pending = { list: list, before: list.querySelectorAll("a[href]").length - 1 };
  });
  document.addEventListener("htmx:afterSettle", function () {
    if (!pending) return;
    var links = pending.list.querySelectorAll("a[href]");
    var next = links[Math.min(pending.before, links.length - 1)];
    pending = null;
    if (next) next.focus();
  });
})();
