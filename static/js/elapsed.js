// The "Looking up" line counts each running call's seconds ("Search docs · 3 s") between the
// server's frames, which carry how long the call had run when the line was rendered
// (data-elapsed-ms); the page adds the time since that line came, on its own clock, so a client
// whose clock is off still counts right. The line is no live region: the seconds are never
// announced (the status region says "Looking up: Search docs" once). Said as chat/tool_progress.py
// says it.
(function () {
  "use strict";

  var SELECTOR = ".indicator time[data-elapsed-ms]";
  var seen = new WeakMap();
  var timer = null;

  function said(seconds) {
    var whole = Math.max(0, Math.floor(seconds));
    var minutes = Math.floor(whole / 60);
    return minutes ? minutes + " min " + (whole % 60) + " s" : whole + " s";
  }

  function tick() {
    var now = performance.now();
    var shown = document.querySelectorAll(SELECTOR);
    shown.forEach(function (el) {
      var since = seen.get(el);
      if (since === undefined) { since = now; seen.set(el, now); }
      var text = said((Number(el.dataset.elapsedMs) + now - since) / 1000);
      if (el.textContent !== text) el.textContent = text;
    });
    if (!shown.length && timer !== null) { clearInterval(timer); timer = null; }
  }

  // Counts only while a call runs: no timer on a page at rest.
  function watch() {
    tick();
    if (timer === null && document.querySelector(SELECTOR)) timer = setInterval(tick, 250);
  }
  document.addEventListener("DOMContentLoaded", watch);
  document.addEventListener("htmx:wsAfterMessage", watch);
})();
