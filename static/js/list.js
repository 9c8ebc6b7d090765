// The conversation list's own work (chat/list_actions.py, chat/news.py): a line's menu (pin,
// archive, delete), one for the page put under the line asked for, done in place; a delete that waits a few seconds for Undo and is sent only
// then, at the next action, or as the page is left (a closed tab keeps the conversation); the
// line of a new conversation once its first message is sent; and the news mark of the
// conversation this page shows, cleared while the page is in front of its reader.
(function () {
  "use strict";

  var UNDO_MS = 6000;
  var pending = null;  // the delete waiting for its undo window: {pk, line, url, body, title, timer}

  function actions() { return document.getElementById("line-actions"); }
  function chat() { return document.querySelector(".chat[data-conversation]"); }
  function currentPk() { var el = chat(); return el ? el.dataset.conversation : ""; }
  function owner() { var el = chat(); return !!el && !el.hasAttribute("data-read-only"); }
  function searchBox() { return document.getElementById("conversation-search"); }
  function send(url, body) {
    return fetch(url, { method: "POST", body: body, credentials: "same-origin", headers: { "HX-Request": "true" } });
  }
  function titleOf(line) {
    var named = line && line.querySelector('[aria-label^="Actions: "]');
    return named ? named.getAttribute("aria-label").replace(/^Actions: /, "") : "";
  }

  // One line at the list's foot says what was done, for a few seconds; a delete's line offers
  // Undo and stays until the delete is sent or undone.
  var SHOWN_MS = 5000;
  var fading = null;
  function say(text, undo) {
    var box = document.getElementById("list-toast");
    if (!box) return null;
    window.clearTimeout(fading);
    box.textContent = "";
    if (!text) return null;
    var words = document.createElement("span");
    words.textContent = text;
    box.appendChild(words);
    if (!undo) {
      fading = window.setTimeout(function () { box.textContent = ""; }, SHOWN_MS);
      return null;
    }
    var button = document.createElement("button");
    button.type = "button";
    button.className = "link-button";
    button.textContent = "Undo";
    button.addEventListener("click", undo);
    box.appendChild(document.createTextNode(" · "));
    box.appendChild(button);
    return button;
  }

  // The list as the server has it now (after a pin, an unpin, an archive, an unarchive), unless
  // the sidebar shows a search.
  function refresh(html) {
    var results = document.getElementById("conversation-results");
    var box = searchBox();
    if (!results || (box && box.value.trim())) return;
    closeMenu(false);
    results.innerHTML = html;
    if (window.htmx) window.htmx.process(results);
    enhance();
  }

  var DONE = {
    pin: "Pinned “%”.",
    unpin: "Unpinned “%”.",
    archive: "Archived “%”.",
    unarchive: "“%” is back in the list."
  };

  function act(button, line) {
    var title = titleOf(line);
    var body = new FormData(actions());
    body.set(button.name, button.value);
    body.set("current", currentPk());
    var outside = !!line && !line.closest("#sidebar");  // the archived page's own list
    send(actions().action, body).then(function (response) {
      return response.text().then(function (text) {
        if (!response.ok) { say(text.length < 300 ? text : "That did not work: reload the page and try again."); return; }
        refresh(text);
        if (outside && line && button.name.indexOf("archive") !== -1) line.remove();
        say(DONE[button.name].replace("%", title));
        var link = document.getElementById("conversation-link-" + button.value) || document.querySelector("#conversation-results a[href]");
        if (link) link.focus();
      });
    }).catch(function () { say("The list could not be changed: check the connection and try again."); });
  }

  function remove(button, line) {
    var body = new FormData(actions());
    body.set("delete", button.value);
    body.set("confirmed", "1");
    line.hidden = true;
    pending = { pk: button.value, line: line, url: actions().action, body: body, title: titleOf(line) };
    pending.timer = window.setTimeout(commit, UNDO_MS);
    var undo = say("Deleted “" + pending.title + "”", cancel);
    if (undo) undo.focus();
  }

  function cancel() {
    if (!pending) return;
    var kept = pending;
    pending = null;
    window.clearTimeout(kept.timer);
    kept.line.hidden = false;
    say("Kept “" + kept.title + "”.");
    var link = kept.line.querySelector("a");
    if (link) link.focus();
  }

  // The undo window is over: the delete is sent. Leaving the page sends it as a beacon.
  function commit(leaving) {
    if (!pending) return;
    var done = pending;
    pending = null;
    window.clearTimeout(done.timer);
    if (leaving === true) { navigator.sendBeacon(done.url, done.body); return; }
    var toast = document.getElementById("list-toast");
    var undoShown = toast && toast.querySelector("button");
    if (undoShown) say("Deleted “" + done.title + "”.");
    send(done.url, done.body).then(function (response) {
      if (response.ok) {
        done.line.remove();
        if (done.pk === currentPk()) window.location.assign("/");
        return;
      }
      return response.text().then(function (text) {
        done.line.hidden = false;
        say(text.length < 300 ? text : "The conversation was not deleted.");
      });
    }).catch(function () {
      done.line.hidden = false;
      say("“" + done.title + "” was not deleted: check the connection and try again.");
    });
  }

  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (event.target !== actions() || !button || !(button.name in DONE || button.name === "delete")) return;
    event.preventDefault();
    commit();  // the next action ends an earlier delete's undo window
    var line = button.closest("li");
    var menu = button.closest("details");
    if (menu) menu.open = false;
    closeMenu(false);
    if (button.name === "delete") remove(button, line); else act(button, line);
  });
  window.addEventListener("pagehide", function () { commit(true); });

  // One menu open at a time; a click elsewhere or Escape closes it (Escape gives the focus back).
  document.addEventListener("toggle", function (event) {
    var menu = event.target;
    if (!menu.classList || !menu.classList.contains("line-menu") || !menu.open) return;
    document.querySelectorAll("details.line-menu[open]").forEach(function (other) {
      if (other !== menu) other.open = false;
    });
    // The list scrolls in a box of its own: the open menu is brought into it.
    var actionsBox = menu.querySelector(".line-actions");
    if (actionsBox) actionsBox.scrollIntoView({ block: "nearest" });
  }, true);
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.line-menu[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.open = false;
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var shared = sharedMenu();
    if (opener && (event.target === opener || (shared && shared.contains(event.target)))) {
      event.stopPropagation();
      closeMenu(true);
      return;
    }
    var menu = event.target.closest && event.target.closest("details.line-menu[open]");
    if (!menu) return;
    event.stopPropagation();  // the page's Escape would stop a run
    menu.open = false;
    menu.querySelector("summary").focus();
  }, true);

  // The menu of a line of the reader's own list (its Pinned group and its dates; not a search,
  // nor the shared list): one for the page (templates/chat/sidebar.html), which a line's "⋯"
  // button, put there by this script, brings under its line, so that a line costs no more than
  // what it shows. Without script, a conversation's own page has its actions.
  var OWN_LINES = 'ul[id^="conversation-group-list-"] > li';
  var ICON = '<svg class="icon" aria-hidden="true" focusable="false"><use href="#icon-line-menu"/></svg>';
  var opener = null;  // the "⋯" button whose line has the menu open

  function sharedMenu() { return document.getElementById("line-menu"); }
  function shownItems() {
    return Array.prototype.filter.call(sharedMenu().querySelectorAll("button"), function (item) { return !item.hidden; });
  }
  function plainTitle(link) {
    var copy = link.cloneNode(true);
    copy.querySelectorAll(".waiting-mark, .news-mark").forEach(function (mark) { mark.remove(); });
    return copy.textContent.trim();
  }

  // Every own line gets its button (again after htmx brings more lines, or a live frame a new
  // title); each named after its line's title.
  function enhance() {
    if (!sharedMenu()) return;
    document.querySelectorAll(OWN_LINES).forEach(function (line) {
      var link = line.querySelector(':scope > a[id^="conversation-link-"]');
      if (!link) return;
      var button = line.querySelector(":scope > .line-button");
      if (!button) {
        button = document.createElement("button");
        button.type = "button";
        button.className = "line-button";
        button.setAttribute("aria-haspopup", "menu");
        button.setAttribute("aria-expanded", "false");
        button.setAttribute("aria-controls", "line-menu");
        button.innerHTML = ICON;
        link.after(button);
      }
      var name = "Actions: " + plainTitle(link);
      if (button.getAttribute("aria-label") !== name) button.setAttribute("aria-label", name);
    });
  }
  var enhancing = false;
  function enhanceSoon() {
    if (enhancing) return;
    enhancing = true;
    window.setTimeout(function () { enhancing = false; enhance(); }, 0);
  }

  function openMenu(button) {
    var menu = sharedMenu();
    var line = button.closest("li");
    var link = line.querySelector(':scope > a[id^="conversation-link-"]');
    closeMenu(false);
    var pinned = !!line.closest(".pinned-list");
    menu.querySelectorAll("button").forEach(function (item) {
      item.value = link.id.replace("conversation-link-", "");
      item.hidden = item.name === (pinned ? "pin" : "unpin");
    });
    menu.setAttribute("aria-label", button.getAttribute("aria-label"));
    line.appendChild(menu);
    menu.hidden = false;
    button.setAttribute("aria-expanded", "true");
    opener = button;
    menu.scrollIntoView({ block: "nearest" });  // the list scrolls in a box of its own
    shownItems()[0].focus();
  }

  // The menu goes back where the page has it, before its line can leave the page.
  function closeMenu(giveFocus) {
    var menu = sharedMenu();
    if (!opener || !menu) return;
    var was = opener;
    opener = null;
    menu.hidden = true;
    was.setAttribute("aria-expanded", "false");
    actions().after(menu);
    if (giveFocus && was.isConnected) was.focus();
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest(".line-button");
    if (button) {
      if (button === opener) closeMenu(true); else openMenu(button);
      return;
    }
    var menu = sharedMenu();
    if (opener && menu && !menu.contains(event.target)) closeMenu(false);
  });
  // In the menu, the arrows go from item to item; leaving it by Tab closes it.
  document.addEventListener("keydown", function (event) {
    var menu = sharedMenu();
    if (event.target.classList && event.target.classList.contains("line-button") && event.key === "ArrowDown") {
      event.preventDefault();
      openMenu(event.target);
      return;
    }
    if (!opener || !menu || !menu.contains(event.target)) return;
    var items = shownItems();
    var at = items.indexOf(event.target);
    var to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: items.length - 1 }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    items[(to + items.length) % items.length].focus();
  });
  document.addEventListener("focusout", function (event) {
    var menu = sharedMenu();
    var to = event.relatedTarget;
    if (!opener || !menu || !menu.contains(event.target) || !to) return;
    if (!menu.contains(to) && to !== opener) closeMenu(false);
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var menu = sharedMenu();
    if (opener && menu && event.detail.target && event.detail.target.contains(menu)) closeMenu(false);
  });
  ["htmx:afterSettle", "htmx:oobAfterSwap", "htmx:wsAfterMessage"].forEach(function (name) {
    document.addEventListener(name, enhanceSoon);
  });
  document.addEventListener("DOMContentLoaded", enhance);

  // News: the page shows this conversation, so a run that ended here is not news once the
  // reader has the page in front of them (its line may be further down the list, unloaded).
  var running = null;  // whether this page's run state says a run is under way
  var unseen = false;  // a run ended here, or the line got a news mark, since the server was told
  function isRunning() {
    var state = document.getElementById("run-state");
    return !!state && state.dataset.running === "true";
  }
  function seen() {
    var pk = currentPk();
    var form = actions();
    if (!unseen || !pk || !owner() || document.hidden || !form) return;
    unseen = false;
    var mark = document.querySelector("#conversation-link-" + pk + " .news-mark");
    if (mark) mark.remove();
    send(form.dataset.seen.replace("/0/", "/" + pk + "/"), new FormData(form));
  }
  function watch() {
    var now = isRunning();
    if (running && !now) unseen = true;
    running = now;
    if (document.querySelector("#conversation-link-" + currentPk() + " .news-mark")) unseen = true;
    seen();
  }
  document.addEventListener("DOMContentLoaded", function () { running = isRunning(); });
  document.addEventListener("visibilitychange", seen);

  // A conversation comes into the list with its first message: once a run starts on a page
  // whose conversation has no line yet (only a hidden one, for its title's live frames), the
  // list is drawn again.
  function arrived() {
    var pk = currentPk();
    var state = document.getElementById("run-state");
    var box = searchBox();
    if (!pk || !owner() || !state || state.dataset.running !== "true" || !box) return;
    var line = document.getElementById("conversation-link-" + pk);
    if ((line && !line.closest("[hidden]")) || box.value.trim()) return;
    if (!window.htmx) return;
    var url = box.getAttribute("hx-get") + "?current=" + encodeURIComponent(pk);
    window.htmx.ajax("GET", url, { target: "#conversation-results", swap: "innerHTML" });
  }
  document.addEventListener("htmx:wsAfterMessage", function () { watch(); arrived(); });
})();
