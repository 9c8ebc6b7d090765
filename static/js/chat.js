// Agent Lab: the little the page needs beyond htmx. No inline handlers (the CSP forbids them).
(function () {
  "use strict";

  function composer() { return document.getElementById("composer"); }

  // Called after every socket frame: touch the composer only when the run state changed, so a
  // streamed text frame costs no style work here.
  var shownRunning = null;
  function applyRunState() {
    var state = document.getElementById("run-state");
    var form = composer();
    if (!state || !form) return;
    var running = state.dataset.running === "true";
    var box = document.getElementById("message");
    if (running === shownRunning && box && box.disabled === running) return;
    shownRunning = running;
    form.querySelectorAll("textarea, button").forEach(function (el) { el.disabled = running; });
    var stop = document.getElementById("stop");
    if (stop) stop.hidden = !running;
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
        if (!stick || scrollPending) return;
        scrollPending = true;
        requestAnimationFrame(function () {
          scrollPending = false;
          if (stick) window.scrollTo(0, document.documentElement.scrollHeight);
        });
      }).observe(transcript, { childList: true, subtree: true, characterData: true });
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
  });

  // Enter sends, Shift+Enter adds a line. Delegated: the server replaces the composer after a send.
  document.addEventListener("keydown", function (event) {
    var box = event.target;
    if (!box || box.id !== "message") return;
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (box.value.trim() && !box.disabled) composer().requestSubmit();
    }
  });
  // Copy buttons in the wire inspector: data-copy names the element whose text is copied.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) return;
    var source = document.querySelector(button.dataset.copy);
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent).then(function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1200);
    });
  });
  document.addEventListener("htmx:wsAfterSend", function (event) {
    if (event.target && event.target.id === "composer") stick = true;
  });
  document.addEventListener("htmx:wsAfterMessage", applyRunState);
  document.addEventListener("htmx:wsOpen", function (event) { event.target.dataset.socket = "open"; });
  document.addEventListener("htmx:wsClose", function (event) { event.target.dataset.socket = "closed"; });
})();
