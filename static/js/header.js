// The conversation header's menus (templates/chat/header.html): "Copy link" copies the
// conversation's address (without the Clipboard API, it selects the address for the user to
// copy); an open menu closes on Escape (the focus back on its button), on a click elsewhere,
// when another one opens, and once one of its links is chosen.
(function () {
  "use strict";

  function menus() { return document.querySelectorAll("[data-header-menu]"); }

  function say(text) {
    var status = document.querySelector("[data-copy-status]");
    if (status) status.textContent = text;
  }

  function selectAddress(field) {
    field.focus();
    field.select();
    field.setSelectionRange(0, field.value.length);
  }

  function copyLink(button) {
    var field = document.querySelector("[data-share-url]");
    if (!field) return;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(
        function () { say("Link copied."); button.focus(); },
        function () { selectAddress(field); say("The link is selected: copy it with Ctrl+C or ⌘C."); }
      );
      return;
    }
    selectAddress(field);
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    say(copied ? "Link copied." : "The link is selected: copy it with Ctrl+C or ⌘C.");
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-copy-link]").forEach(function (button) { button.hidden = false; });
  });

  document.addEventListener("click", function (event) {
    var target = event.target;
    var copy = target.closest ? target.closest("[data-copy-link]") : null;
    if (copy) { copyLink(copy); return; }
    var inside = target.closest ? target.closest("[data-header-menu]") : null;
    menus().forEach(function (menu) { if (menu !== inside) menu.open = false; });
    // A download chosen: the menu closes once the browser has the link.
    if (inside && target.closest("a[href]")) setTimeout(function () { inside.open = false; }, 0);
  });

  document.addEventListener("focusin", function (event) {
    var inside = event.target.closest ? event.target.closest("[data-header-menu]") : null;
    menus().forEach(function (menu) { if (menu.open && menu !== inside) menu.open = false; });
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.isComposing || !event.target.closest) return;
    var menu = event.target.closest("[data-header-menu]");
    if (!menu || !menu.open) return;
    event.preventDefault();
    event.stopPropagation();  // Escape closes the menu, and stops no run
    menu.open = false;
    menu.querySelector("summary").focus();
  }, true);
})();
