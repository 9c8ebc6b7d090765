// Notices for the work people walk away from: a run that waits for approval (waiting.js), a
// run that finished or failed, an evaluation that finished or failed. The tab title carries a
// mark ("Reply ready · Title · Agent Lab"); a mark of something that ended while the page was
// hidden stays until the tab is seen again. Once the user allowed it, a browser notification
// names it too. One offer ([data-notify], shown by .notify-offer rows) asks for all of them.
window.AgentLabNotices = (function () {
  "use strict";

  var ORDER = ["ended", "waiting"];  // the order of marks in the title
  var marks = {};
  var prefixes = ["Waiting for approval · "];  // every mark ever shown (the server renders this one)

  function untitled() {
    var title = document.title;
    for (var found = true; found;) {
      found = false;
      for (var i = 0; i < prefixes.length; i++) {
        if (title.indexOf(prefixes[i]) === 0) { title = title.slice(prefixes[i].length); found = true; }
      }
    }
    return title;
  }

  function mark(kind, text) {
    var rest = untitled();
    if (text) {
      marks[kind] = text;
      if (prefixes.indexOf(text + " · ") < 0) prefixes.push(text + " · ");
    } else {
      delete marks[kind];
    }
    var shown = ORDER.filter(function (k) { return marks[k]; }).map(function (k) { return marks[k] + " · "; });
    document.title = shown.join("") + rest;
  }

  function supported() { return "Notification" in window; }

  function notify(heading, body, tag) {
    if (!document.hidden || !supported() || Notification.permission !== "granted") return;
    try {
      var note = new Notification(heading, { body: body, tag: tag });
      note.onclick = function () { window.focus(); note.close(); };
    } catch (e) { /* a browser that only notifies from a service worker */ }
  }

  // Something ended: marked in the title (while the page is hidden) and notified.
  function ended(text, body, tag) {
    if (!document.hidden) return;
    mark("ended", text);
    notify(text, body, tag);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) mark("ended", "");
  });

  // The offer shows while there is something to wait for, the browser has not been asked yet,
  // and no other offer is on screen (the waiting card has its own).
  function offer() {
    var ask = supported() && Notification.permission === "default";
    var waitingOffer = document.querySelector(".waiting-notify:not([hidden])");
    document.querySelectorAll(".notify-offer").forEach(function (row) {
      row.hidden = !ask || !!waitingOffer || !busy();
    });
  }

  function heading(selector) {
    var el = document.querySelector(selector);
    return el ? el.textContent.replace(/\s+/g, " ").trim() : "";
  }

  // A conversation's run: #run-state says whether one runs and, once it ended, how.
  var running = null;
  function watchRun() {
    var state = document.getElementById("run-state");
    if (!state) return;
    var now = state.dataset.running === "true";
    var how = state.dataset.ended || "";
    if (running && !now && how) {
      var chat = document.querySelector(".chat[data-conversation]");
      var tag = "agentlab-run-" + (chat ? chat.dataset.conversation : "");
      if (how === "completed") ended("Reply ready", heading("#conversation-title"), tag);
      else if (how === "failed" || how === "interrupted") ended("Run failed", heading("#conversation-title"), tag);
    }
    running = now;
  }

  // An evaluation or a comparison: #eval-progress / #compare-progress carries its status,
  // swapped in as results arrive.
  function evaluationProgress() {
    return document.getElementById("eval-progress") || document.getElementById("compare-progress");
  }
  var evaluating = null;
  function watchEvaluation() {
    var progress = evaluationProgress();
    if (!progress) return;
    var status = progress.dataset.status || "";
    var now = status === "in_progress";
    if (evaluating && !now) {
      var what = progress.id === "compare-progress" ? "Comparison" : "Evaluation";
      var body = heading(".eval-page h1") + (heading("#" + progress.id) ? " · " + heading("#" + progress.id) : "");
      var tag = "agentlab-eval-" + location.pathname;
      if (status === "completed") ended(what + " finished", body, tag);
      else if (status === "failed" || status === "interrupted") ended(what + " failed", body, tag);
    }
    evaluating = now;
  }

  function busy() {
    var state = document.getElementById("run-state");
    if (state) return state.dataset.running === "true" || !!state.dataset.waiting;
    var progress = evaluationProgress();
    return !!progress && progress.dataset.status === "in_progress";
  }

  function update() { watchRun(); watchEvaluation(); offer(); }

  document.addEventListener("DOMContentLoaded", update);
  document.addEventListener("htmx:wsAfterMessage", update);
  document.addEventListener("htmx:afterSettle", update);

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-notify]") : null;
    if (!button || !supported()) return;
    Notification.requestPermission().then(function (answer) {
      update();
      document.dispatchEvent(new CustomEvent("agentlab:notices"));
      var say = document.getElementById("announce") || document.getElementById("eval-announce");
      if (say) say.textContent = answer === "granted" ? "You will be notified while this page is in the background." : "Notifications stay off.";
    });
  });

  return { mark: mark, notify: notify, supported: supported, update: update };
})();
