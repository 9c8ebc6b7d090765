// Tool calls that wait for a person (templates/chat/waiting.html): the page title says so and,
// once the owner allowed it, a notification names the tools while the page is in the
// background (both through notices.js, which also asks for the permission); a call that starts
// waiting, or the next one after a decision, takes the focus; Escape in a card closes its edit
// box and stops no run; a refused edit marks its box.
(function () {
  "use strict";

  var notices = window.AgentLabNotices;
  var shown = null;  // the waiting tools the page last showed ("" when none waits)
  var deciding = false;  // this page sent a decision: the focus follows to what is left

  function chat() { return document.querySelector(".chat[data-conversation]"); }
  function owner() { var el = chat(); return !!el && !el.hasAttribute("data-read-only"); }
  function waitingTools() {
    var state = document.getElementById("run-state");
    return state ? state.dataset.waiting || "" : "";
  }
  function notifiable() { return notices.supported() && owner(); }

  function title(tools) { notices.mark("waiting", tools ? "Waiting for approval" : ""); }

  function notify(tools) {
    if (!notifiable()) return;
    var heading = document.getElementById("conversation-title");
    var body = tools + (heading ? " · " + heading.textContent.trim() : "");
    notices.notify("Waiting for your approval", body, "agentlab-waiting-" + chat().dataset.conversation);
  }

  // "Notify me" shows while the browser has not been asked yet; asking needs the owner's click.
  function offerNotifications(root) {
    var ask = notifiable() && Notification.permission === "default";
    (root || document).querySelectorAll(".waiting-notify").forEach(function (row) { row.hidden = !ask; });
  }

  function focusFirstCall() {
    var call = document.querySelector(".chat:not([data-read-only]) .waiting-call");
    if (call) call.focus();
    return !!call;
  }

  function lostFocus() {
    var active = document.activeElement;
    if (!active || active === document.body) return true;
    // The composer took the focus when the run stopped streaming; nothing was typed in it.
    return active.id === "message" && !active.value;
  }

  function update(fromSocket) {
    var tools = waitingTools();
    if (tools !== shown) {
      var started = shown === "" && !!tools;
      shown = tools;
      title(tools);
      if (started && fromSocket) notify(tools);
      if (started && fromSocket && lostFocus()) focusFirstCall();
    }
    if (deciding && fromSocket) {
      deciding = false;
      if (lostFocus()) focusFirstCall();
    }
    markRefusedEdits();
    offerNotifications();
    notices.update();
  }

  // A refused edit: its box is marked invalid and, when its form had the focus, takes it back.
  function markRefusedEdits() {
    var active = document.activeElement;
    document.querySelectorAll(".waiting-error").forEach(function (error) {
      var box = document.querySelector('[aria-describedby="' + error.id + '"]');
      if (!box) return;
      if (!error.textContent.trim()) { box.removeAttribute("aria-invalid"); return; }
      box.setAttribute("aria-invalid", "true");
      if (error.dataset.seen) return;  // the same refusal: the focus stays where the owner put it
      error.dataset.seen = "true";
      if (active && active !== box && box.form && box.form.contains(active)) box.focus();
    });
  }

  document.addEventListener("DOMContentLoaded", function () { update(false); });
  document.addEventListener("htmx:wsAfterMessage", function () { update(true); });

  document.addEventListener("htmx:wsAfterSend", function (event) {
    var sent = event.target;
    if (!sent || !sent.closest || !sent.closest(".waiting-calls")) return;
    deciding = true;
    // The reason of a refusal comes again, new, if this one is refused too.
    var error = sent.querySelector ? sent.querySelector(".waiting-error") : null;
    if (error) error.textContent = "";
  });

  document.addEventListener("agentlab:notices", function () { offerNotifications(); });

  // Escape in a card: an open edit box closes (the focus back on its summary); no run stops.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.isComposing || !event.target.closest) return;
    var card = event.target.closest(".waiting-calls");
    if (!card) return;
    event.preventDefault();
    var edit = event.target.closest(".waiting-edit");
    if (edit && edit.open) {
      edit.open = false;
      edit.querySelector("summary").focus();
    }
  }, true);  // capture: before the page's own Escape
})();
