// Attached files in the composer (templates/chat/attachments.html#controls). The Attach button,
// a drop anywhere on the page and a paste add files; each becomes a chip: its name, its size, a
// thumbnail for an image, a Remove button. On a conversation each file is uploaded at once (the
// gate answers with a token, or with the one line that says why not) and Send puts the tokens in
// the frame; the run's first frame empties the composer and its chips. On the first screen the
// files go with the form.
(function () {
  "use strict";

  var pasted = 0;
  var said = "";  // the line this script put in the notice area, taken back once it no longer holds

  function root() { return document.querySelector("[data-attach]"); }
  function list() { return document.getElementById("attach-chips"); }
  function field() { return document.getElementById("attach-input"); }
  function chips() {
    var shown = list();
    return shown ? Array.prototype.slice.call(shown.children) : [];
  }
  function uploading() { return !!root() && !!root().dataset.uploadUrl; }

  function say(line) {
    var notice = document.getElementById("notice");
    if (!notice) return;
    notice.textContent = line;
    notice.classList.toggle("notice-error", !!line);
    said = line;
  }
  function unsay() { if (said) say(""); }

  // Sizes as the server writes them (Django's filesizeformat).
  function size(bytes) {
    if (bytes < 1024) return bytes + (bytes === 1 ? " byte" : " bytes");
    var units = ["KB", "MB", "GB"];
    var value = bytes / 1024;
    var unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
    return value.toFixed(1) + " " + units[unit];
  }

  function kindOf(file) {
    if (/^image\//.test(file.type)) return "image";
    return file.type === "application/pdf" || /\.pdf$/i.test(file.name) ? "pdf" : "text";
  }

  function chip(file) {
    var item = document.createElement("li");
    item.className = "attach-chip";
    item.dataset.name = file.name;
    item.dataset.kind = kindOf(file);
    item.dataset.state = uploading() ? "uploading" : "ready";
    item.file = file;
    if (item.dataset.kind === "image") {
      var thumb = document.createElement("img");
      thumb.className = "chip-thumb";
      thumb.alt = "";
      thumb.src = item.objectUrl = URL.createObjectURL(file);
      item.appendChild(thumb);
    } else {
      var icon = document.getElementById("attach-icon-" + item.dataset.kind);
      if (icon) item.appendChild(icon.content.cloneNode(true));
    }
    var name = document.createElement("span");
    name.className = "chip-name";
    name.textContent = file.name;
    var facts = document.createElement("span");
    facts.className = "chip-facts";
    facts.textContent = size(file.size) + (uploading() ? " · uploading…" : "");
    var remove = document.createElement("button");
    remove.type = "button";
    remove.className = "chip-remove";
    remove.setAttribute("aria-label", "Remove " + file.name);
    remove.title = "Remove " + file.name;
    remove.dataset.attachRemove = "";
    remove.innerHTML = '<svg viewBox="0 0 16 16" aria-hidden="true" focusable="false"><path d="M4.5 4.5l7 7M11.5 4.5l-7 7" stroke="currentColor" stroke-width="1.6" stroke-linecap="round"/></svg>';
    item.append(name, facts, remove);
    return item;
  }

  // The first screen's input sends the files of the chips shown, no others.
  function keep() {
    var input = field();
    if (!input || uploading() || !window.DataTransfer) return;
    var files = new DataTransfer();
    chips().forEach(function (item) { if (item.file) files.items.add(item.file); });
    input.files = files.files;
  }

  function add(files) {
    var box = root();
    var shown = list();
    var message = document.getElementById("message");
    if (!box || !shown || (message && message.disabled) || !files.length) return;
    var max = parseInt(box.dataset.max, 10);
    var limit = parseInt(box.dataset.maxBytes, 10);
    var refused = "";
    unsay();
    Array.prototype.forEach.call(files, function (file) {
      if (chips().length >= max) {
        refused = refused || "A message carries at most " + max + " files: " + file.name + " was not attached.";
        return;
      }
      if (file.size > limit) {
        refused = refused || file.name + " is " + size(file.size) + "; the limit is " + box.dataset.limitText + ".";
        return;
      }
      var item = chip(file);
      shown.appendChild(item);
      if (uploading()) upload(item, box);
    });
    keep();
    if (refused) say(refused);
    update();
  }

  function upload(item, box) {
    var body = new FormData();
    body.append("file", item.file, item.dataset.name);
    item.controller = window.AbortController ? new AbortController() : null;
    fetch(box.dataset.uploadUrl, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": box.dataset.csrf, "Accept": "application/json" },
      signal: item.controller ? item.controller.signal : undefined
    }).then(function (response) {
      if (response.redirected) return { error: item.dataset.name + " was not attached: log in again." };
      return response.json().catch(function () {
        return { error: item.dataset.name + " was not attached: the server answered " + response.status + "." };
      });
    }).then(function (answer) {
      if (!item.isConnected) return;
      if (!answer.token) {
        discard(item);
        say(answer.error || item.dataset.name + " was not attached.");
        update();
        return;
      }
      item.dataset.token = answer.token;
      item.dataset.kind = answer.kind;
      item.dataset.state = "ready";
      var pages = answer.pages === 1 ? "1 page" : answer.pages + " pages";
      item.querySelector(".chip-facts").textContent = answer.kind === "pdf" ? "PDF · " + pages + " · " + answer.size_text : answer.size_text;
      update();
    }).catch(function (error) {
      if (error && error.name === "AbortError") return;
      if (!item.isConnected) return;
      discard(item);
      say(item.dataset.name + " was not attached: the upload failed. Try again.");
      update();
    });
  }

  function discard(item) {
    if (item.controller) item.controller.abort();
    if (item.objectUrl) URL.revokeObjectURL(item.objectUrl);
    item.remove();
  }

  function clear() {
    chips().forEach(discard);
    keep();
    update();
  }

  // What stops a send while chips are shown: a file still uploading, or images for a model known
  // to take none (the server refuses them too).
  function held() {
    var items = chips();
    var box = root();
    if (items.some(function (item) { return item.dataset.state === "uploading"; })) {
      return { line: "Wait: a file is still uploading.", warn: false };
    }
    var images = items.filter(function (item) { return item.dataset.kind === "image"; })
      .map(function (item) { return item.dataset.name; });
    if (box && box.dataset.imagesRefused && images.length) {
      // Named as chat.runs.providers.images_refused names them: three, then "…".
      var names = images.slice(0, 3).join(", ") + (images.length > 3 ? " …" : "");
      return { line: box.dataset.imagesRefused.replace("{names}", names), warn: true };
    }
    return null;
  }

  function update() {
    var shown = list();
    if (!shown) return;
    var items = chips();
    shown.hidden = !items.length;
    var message = document.getElementById("message");
    // A message may be files alone.
    if (message) message.required = !items.length;
    var hold = held();
    var warning = document.getElementById("attach-warning");
    if (warning) {
      var line = hold && hold.warn ? hold.line : "";
      if (warning.textContent !== line) warning.textContent = line;
      warning.hidden = !line;
    }
    var send = document.getElementById("send");
    if (!send) return;
    if (hold) {
      if (!send.disabled) send.dataset.attachHeld = "";
      send.disabled = true;
    } else if (send.hasAttribute("data-attach-held")) {
      send.removeAttribute("data-attach-held");
      var state = document.getElementById("run-state");
      var chat = send.closest(".chat");
      send.disabled = (!!state && state.dataset.running === "true") || (!!chat && chat.dataset.socket === "closed");
    }
  }

  document.addEventListener("click", function (event) {
    var target = event.target.closest ? event.target : null;
    if (!target) return;
    if (target.closest("[data-attach-open]")) {
      var input = field();
      if (input) input.click();
      return;
    }
    var remove = target.closest("[data-attach-remove]");
    if (!remove) return;
    var item = remove.closest(".attach-chip");
    var next = item.nextElementSibling || item.previousElementSibling;
    discard(item);
    keep();
    unsay();
    update();
    var focus = next ? next.querySelector("[data-attach-remove]") : document.querySelector("[data-attach-open]");
    if (focus) focus.focus();
  });

  document.addEventListener("change", function (event) {
    var input = event.target;
    if (input.id !== "attach-input") return;
    var picked = Array.prototype.slice.call(input.files || []);
    if (uploading()) input.value = "";
    add(picked);
    keep();
  });

  // Drop: files dragged anywhere over the page; the composer shows where they go.
  var depth = 0;
  function carriesFiles(event) {
    var types = event.dataTransfer ? event.dataTransfer.types : null;
    return !!root() && !!types && Array.prototype.indexOf.call(types, "Files") >= 0;
  }
  function dropping(on) {
    var form = document.getElementById("composer");
    if (form) form.classList.toggle("dropping", on);
  }
  document.addEventListener("dragenter", function (event) {
    if (!carriesFiles(event)) return;
    depth += 1;
    dropping(true);
  });
  document.addEventListener("dragover", function (event) {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    dropping(true);
  });
  document.addEventListener("dragleave", function (event) {
    if (!carriesFiles(event)) return;
    depth = Math.max(0, depth - 1);
    if (!depth) dropping(false);
  });
  document.addEventListener("drop", function (event) {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth = 0;
    dropping(false);
    add(event.dataTransfer.files);
  });

  // Paste: a screenshot comes as "image.png" (or nameless), so it is named by its order.
  function named(file) {
    if (!/^image\//.test(file.type) || (file.name && !/^image\.\w+$/i.test(file.name))) return file;
    pasted += 1;
    var extension = (file.type.split("/")[1] || "png").replace("jpeg", "jpg");
    return new File([file], "Pasted image " + pasted + "." + extension, { type: file.type });
  }
  document.addEventListener("paste", function (event) {
    var data = event.clipboardData;
    if (!root() || !data) return;
    var found = [];
    Array.prototype.forEach.call(data.items || [], function (item) {
      var file = item.kind === "file" ? item.getAsFile() : null;
      if (file) found.push(file);
    });
    if (!found.length) return;
    event.preventDefault();
    add(found.map(named));
  });

  // The frame carries the tokens; a send that must wait says why instead.
  document.addEventListener("htmx:wsConfigSend", function (event) {
    var detail = event.detail;
    if (!detail.elt || detail.elt.id !== "composer" || !chips().length) return;
    var hold = held();
    if (hold) {
      event.preventDefault();
      if (!hold.warn) say(hold.line);
      return;
    }
    var frame = Object.assign({}, detail.parameters);
    if (detail.headers) frame.HEADERS = detail.headers;
    frame.attachments = chips().map(function (item) { return item.dataset.token; });
    detail.messageBody = JSON.stringify(frame);
  });
  document.addEventListener("submit", function (event) {
    if (!event.target || event.target.id !== "composer" || uploading()) return;
    var hold = held();
    if (hold) { event.preventDefault(); say(hold.line); }
  });

  // The run's first frame replaces the sender's message box: the chips went with the message.
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    if (event.target && event.target.id === "message") clear();
  });
  // The page's run state and connection enable Send again; what the chips hold may not.
  document.addEventListener("htmx:wsAfterMessage", update);
  document.addEventListener("htmx:wsOpen", update);
  document.addEventListener("htmx:wsClose", update);
  document.addEventListener("DOMContentLoaded", function () { keep(); update(); });
})();
