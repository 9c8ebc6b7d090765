// Slash commands (templates/chat/prompts.html): "/" at the start of the message box lists the
// prompts of the MCP servers above it; Up and Down choose, Enter or Tab takes one, Escape closes,
// a tap works too. A prompt with arguments asks for them in a small form first. Its text goes
// into the message box, in place of the command typed, to edit and send: nothing is sent from
// here. The box keeps its role (a textbox) and points at the list with aria-activedescendant.
(function () {
  "use strict";

  var chosen = null;      // the prompt whose form is open, or whose text is on its way
  var loading = 0;        // the latest list request, so an older answer is dropped
  var announced = "";

  function el(id) { return document.getElementById(id); }
  function box() { return el("message"); }
  function popup() { return el("prompt-popup"); }
  function list() { return el("prompt-list"); }
  function panel() { return el("prompt-panel"); }

  // "/inc" -> "inc"; null unless the box holds just a slash command.
  function typed(value) {
    var match = /^\/(\S*)$/.exec(value);
    return match ? match[1].toLowerCase() : null;
  }

  function mode() {
    var root = popup();
    if (!root || root.hidden) return "closed";
    return panel().hidden ? "list" : "form";
  }

  function say(text) {
    var status = el("prompt-status");
    if (status && text !== announced) status.textContent = announced = text;
  }

  // An error: in the open form (on the argument it names), else on the chat's notice line
  // above the composer.
  function fail(text, argument) {
    var line = mode() === "form" ? panel().querySelector("[data-prompt-error]") : null;
    if (line) {
      line.textContent = text;
      panel().querySelectorAll("[data-argument]").forEach(function (input) {
        var named = input.dataset.argument === argument;
        if (named) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
        if (named) input.focus();
      });
      place();
      return;
    }
    var notice = el("notice");
    if (notice) { notice.textContent = text; notice.classList.toggle("notice-error", !!text); }
  }

  function options() { return Array.prototype.slice.call(list().querySelectorAll("[role=option]")); }
  function visible() { return options().filter(function (option) { return !option.hidden; }); }
  function current() { return list().querySelector('[role=option][aria-selected="true"]'); }

  function mark(option) {
    options().forEach(function (each) {
      each.setAttribute("aria-selected", each === option ? "true" : "false");
    });
    var input = box();
    if (!input) return;
    if (option) {
      input.setAttribute("aria-activedescendant", option.id);
      option.scrollIntoView({ block: "nearest" });
    } else {
      input.removeAttribute("aria-activedescendant");
    }
  }

  // The server replaces the box when a run starts: it is wired again when used.
  function wire(input) {
    input.setAttribute("aria-controls", "prompt-list");
    input.setAttribute("aria-autocomplete", "list");
  }

  function show(which) {
    var root = popup();
    root.hidden = false;
    list().hidden = el("prompt-heading").hidden = which !== "list";
    panel().hidden = which !== "form";
    if (which !== "list") { el("prompt-empty").hidden = true; mark(null); }
    place();
  }

  // Above the box, unless it would go under the top bar (a short conversation's composer sits
  // high on the page): then below it, where the page can scroll to it.
  function place() {
    var root = popup();
    var bar = document.querySelector(".topbar");
    root.classList.remove("prompt-popup-below");
    if (root.getBoundingClientRect().top < (bar ? bar.getBoundingClientRect().bottom : 0)) {
      root.classList.add("prompt-popup-below");
    }
  }

  function close() {
    var root = popup();
    if (!root) return;
    root.hidden = true;
    panel().hidden = true;
    panel().textContent = "";
    mark(null);
  }

  function load() {
    var request = ++loading;
    return fetch(popup().dataset.promptsUrl, { credentials: "same-origin" }).then(function (response) {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.text();
    }).then(function (html) {
      if (request === loading) list().innerHTML = html;
    });
  }

  // The prompts whose command holds what was typed; the first is marked.
  function filter(query) {
    if (query === null || mode() === "form") return;
    var all = options();
    if (!all.length) { close(); return; }  // no prompts: the box is as it always was
    var count = 0;
    all.forEach(function (option) {
      option.hidden = option.dataset.command.toLowerCase().indexOf(query) < 0;
      if (!option.hidden) count += 1;
    });
    show("list");
    var empty = el("prompt-empty");
    empty.hidden = count > 0;
    empty.textContent = count ? "" : "No prompt matches /" + query + ". Enter sends it as a message.";
    place();
    var marked = current();
    mark(marked && !marked.hidden ? marked : visible()[0] || null);
    say(count ? count + (count === 1 ? " prompt" : " prompts") + ": Up and Down to choose, Enter to insert, Escape to close."
      : "No prompt matches.");
  }

  function update() {
    var query = typed(box().value);
    if (query === null) {
      if (mode() === "list") close();
      return;
    }
    if (mode() === "form") return;
    if (mode() === "closed") {
      load().then(function () { filter(typed(box().value)); }, function () {
        fail("The prompts could not be loaded: reload the page.");
      });
    }
    filter(query);
  }

  function choose(option) {
    fail("");
    chosen = { server: option.dataset.server, name: option.dataset.name, command: option.dataset.command };
    var form = option.dataset.form && el(option.dataset.form);
    if (!form) { close(); ask({}); return; }
    panel().textContent = "";
    panel().appendChild(form.content.cloneNode(true));
    show("form");
    var first = panel().querySelector("input");
    if (first) first.focus();
  }

  function cancel() {
    close();
    var input = box();
    if (input) input.focus();
  }

  // The prompt's text from its server, for these arguments; an error is one line, and what
  // was typed (the box, the form) stays.
  function ask(values) {
    var root = popup();
    var prompt = chosen;
    var insert = panel().querySelector("[type=submit]");
    if (insert) insert.disabled = true;
    fetch(root.dataset.promptUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": root.dataset.csrf },
      body: JSON.stringify({ server: prompt.server, name: prompt.name, arguments: values })
    }).then(function (response) {
      return response.json().catch(function () {
        return { error: "The prompt could not be fetched (HTTP " + response.status + "): reload the page and try again." };
      });
    }, function () {
      return { error: "The prompt could not be fetched: the connection failed. Try again." };
    }).then(function (answer) {
      if (insert) insert.disabled = false;
      if (typeof answer.text === "string") put(answer.text, prompt.command);
      else fail(answer.error || "The prompt could not be fetched.", answer.argument);
    });
  }

  function put(text, command) {
    var input = box();
    close();
    if (!input) return;
    input.value = text;  // in place of the command typed; the person sends it, or not
    input.dispatchEvent(new Event("input", { bubbles: true }));
    input.focus();
    input.setSelectionRange(text.length, text.length);
    fail("");
    say(command + " is in the message box: edit it, then send.");
  }

  document.addEventListener("input", function (event) {
    if (event.target !== box() || !popup()) return;
    wire(event.target);
    update();
  });

  document.addEventListener("submit", function (event) {
    if (event.target.id !== "prompt-arguments") return;
    event.preventDefault();
    var values = {};
    panel().querySelectorAll("[data-argument]").forEach(function (input) {
      values[input.dataset.argument] = input.value;
    });
    ask(values);
  });

  // Capture, on the window: before the composer's Enter (which sends) and the page's Escape
  // (which stops a run) hear the key.
  window.addEventListener("keydown", function (event) {
    var input = box();
    var key = event.key;
    if (!input || event.isComposing || !popup()) return;
    if (mode() === "form" && key === "Escape" && panel().contains(event.target)) {
      cancel();
    } else if (event.target !== input) {
      return;
    } else if (mode() === "closed" && key === "ArrowDown" && typed(input.value) !== null) {
      update();  // the list closed with Escape comes back
    } else if (mode() !== "list") {
      return;
    } else if (key === "ArrowDown" || key === "ArrowUp") {
      var shown = visible();
      if (!shown.length) return;
      var at = shown.indexOf(current());
      at = key === "ArrowDown" ? (at + 1) % shown.length : (at <= 0 ? shown.length : at) - 1;
      mark(shown[at]);
    } else if ((key === "Enter" || key === "Tab") && !event.shiftKey) {
      var option = current();
      if (!option) { close(); return; }  // nothing matches: Enter sends what was typed
      choose(option);
    } else if (key === "Escape") {
      close();  // until the box is edited again
    } else {
      return;
    }
    event.preventDefault();
    event.stopPropagation();
  }, true);

  // A press on an option keeps the focus in the box (and the phone's keyboard up).
  document.addEventListener("mousedown", function (event) {
    if (event.target.closest && event.target.closest("#prompt-list [role=option]")) event.preventDefault();
  });
  document.addEventListener("mousemove", function (event) {
    var option = event.target.closest && event.target.closest("#prompt-list [role=option]");
    if (option && option !== current()) mark(option);
  });
  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target : null;
    if (!target || !popup()) return;
    var option = target.closest("#prompt-list [role=option]");
    if (option) { choose(option); return; }
    if (target.closest("[data-prompt-cancel]")) { cancel(); return; }
    if (mode() === "list" && !target.closest("#prompt-popup") && target !== box()) close();
  });
})();
