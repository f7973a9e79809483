// Countersign's pages: the connection indicator, reconnects after clean closes, countdowns,
// error notices for htmx requests, and keyboard shortcuts. No inline script anywhere (the
// Content-Security-Policy forbids it); htmx and its ws extension do the swapping.
(function () {
  "use strict";

  // --- Connection indicator and reconnects ---------------------------------------------------

  var RECONNECT_MIN_MS = 500;
  var RECONNECT_MAX_MS = 5000;
  var CLOSE_FORBIDDEN = 4403;
  var CLOSE_NOT_FOUND = 4404;
  var CLOSE_TOO_MANY = 4429; // this person's cap of open pages (COUNTERSIGN_MAX_SOCKETS_PER_USER)
  var cleanRetries = 0;

  function indicator(state, text) {
    var element = document.getElementById("connection");
    if (!element) return;
    element.dataset.state = state;
    element.textContent = text;
  }

  // The extension's own backoff after an abnormal close grows to a minute; an approver's
  // queue should come back within seconds of the server (with jitter, so tabs spread out).
  if (window.htmx) {
    htmx.config.wsReconnectDelay = function (retryCount) {
      var ceiling = Math.min(RECONNECT_MAX_MS, RECONNECT_MIN_MS * Math.pow(2, retryCount));
      return ceiling * (0.5 + Math.random() / 2);
    };
  }

  document.addEventListener("htmx:wsConnecting", function () {
    indicator("down", "Reconnecting…");
  });

  document.addEventListener("htmx:wsOpen", function () {
    cleanRetries = 0;
    indicator("up", "Live");
  });

  // The ws extension reconnects by itself only after 1006, 1011, 1012 and 1013. A clean close
  // (1000, 1001: a server restart, a proxy's idle timeout) is reconnected here, with backoff.
  // On every connect the server sends the whole page state again, from the database.
  document.addEventListener("htmx:wsClose", function (event) {
    var code = event.detail.event.code;
    var socketElement = event.target;
    if (code === CLOSE_FORBIDDEN) {
      indicator("off", "Offline — log in again");
      return;
    }
    if (code === CLOSE_NOT_FOUND) {
      indicator("off", "Offline");
      return;
    }
    if (code === CLOSE_TOO_MANY) {
      indicator("off", "Offline — too many open pages; close some and reload");
      return;
    }
    indicator("down", "Reconnecting…");
    if (code !== 1000 && code !== 1001) return;
    var delay = Math.min(RECONNECT_MAX_MS, RECONNECT_MIN_MS * Math.pow(2, cleanRetries));
    cleanRetries += 1;
    window.setTimeout(function () {
      if (document.body.contains(socketElement)) {
        event.detail.socketWrapper.reconnect();
      }
    }, delay * (0.5 + Math.random() / 2));
  });

  // After each push: the page title carries the queue's count, and the call page's own
  // listeners (countdowns) pick up the new elements.
  document.addEventListener("htmx:wsAfterMessage", function () {
    syncTitle();
    tick();
    syncPicks();
    restoreFocus();
  });
  document.addEventListener("htmx:afterSettle", function () {
    syncTitle();
    tick();
    syncPicks();
  });

  function syncTitle() {
    var head = document.getElementById("queue-head");
    if (head && head.dataset.title) document.title = head.dataset.title;
  }

  // --- Countdowns ----------------------------------------------------------------------------
  // Each <time data-expires data-now> counts down from the server's clock at render time, so a
  // browser whose clock is off still shows the right time left.

  var seen = new WeakMap();

  function format(seconds) {
    if (seconds <= 0) return "expiring";
    var days = Math.floor(seconds / 86400);
    var hours = Math.floor((seconds % 86400) / 3600);
    var minutes = Math.floor((seconds % 3600) / 60);
    var rest = seconds % 60;
    var two = function (n) { return (n < 10 ? "0" : "") + n; };
    if (days) return days + "d " + two(hours) + "h";
    if (hours) return hours + "h " + two(minutes) + "m";
    if (minutes) return minutes + "m " + two(rest) + "s";
    return rest + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-expires]").forEach(function (element) {
      if (!seen.has(element)) seen.set(element, now);
      var expires = Date.parse(element.dataset.expires);
      var serverNow = Date.parse(element.dataset.now);
      if (isNaN(expires) || isNaN(serverNow)) return;
      var left = Math.floor((expires - serverNow - (now - seen.get(element))) / 1000);
      var text = format(left);
      if (element.textContent !== text) element.textContent = text;
      element.classList.toggle("soon", left < 300);
      element.classList.toggle("over", left <= 0);
    });
  }

  // --- Errors of htmx requests ---------------------------------------------------------------
  // A decision that changes nothing answers 409 with a sentence in text/plain: show it.

  document.addEventListener("htmx:responseError", function (event) {
    var notice = document.getElementById("notice");
    if (!notice) return;
    var xhr = event.detail.xhr;
    var text = xhr.getResponseHeader("Content-Type") &&
      xhr.getResponseHeader("Content-Type").indexOf("text/plain") === 0
      ? xhr.responseText
      : "The server answered " + xhr.status + ".";
    notice.textContent = text.slice(0, 500);
    notice.hidden = false;
  });
  document.addEventListener("htmx:sendError", function () {
    var notice = document.getElementById("notice");
    if (!notice) return;
    notice.textContent = "The server could not be reached. Try again.";
    notice.hidden = false;
  });
  document.addEventListener("htmx:beforeRequest", function () {
    var notice = document.getElementById("notice");
    if (notice) notice.hidden = true;
  });

  // --- Edit, then approve ---------------------------------------------------------------------
  // The "Edit arguments" field is sent only while it is open (a closed one is disabled, so an
  // approval without an edit sends no arguments at all), and says as it is typed whether the
  // text is a JSON object. JSON.parse is only a first check (it accepts duplicate names, for
  // one): the server reads the edit strictly and answers with its reason.

  var EDIT_UNCHANGED = "Approve with changed arguments checks them against every policy " +
    "again; other approvals then start over.";

  function syncEditors() {
    document.querySelectorAll("details.edit-arguments").forEach(function (details) {
      var field = details.querySelector("textarea");
      if (field) field.disabled = !details.open;
    });
  }

  function checkEdit(field) {
    var check = document.getElementById(field.getAttribute("aria-describedby"));
    if (!check) return;
    var state = "unchanged";
    var text = EDIT_UNCHANGED;
    if (field.value !== field.defaultValue) {
      try {
        var value = JSON.parse(field.value.trim() === "" ? "{}" : field.value);
        if (value === null || typeof value !== "object" || Array.isArray(value)) {
          state = "invalid";
          text = "Not a JSON object: the arguments must be an object {…}.";
        } else {
          state = "changed";
          text = "Edited: Approve checks and approves these arguments instead of the agent's.";
        }
      } catch (error) {
        state = "invalid";
        text = "Not JSON: " + error.message;
      }
    }
    check.dataset.state = state;
    check.textContent = text;
    field.setAttribute("aria-invalid", state === "invalid" ? "true" : "false");
  }

  // "toggle" does not bubble: listen in the capture phase.
  document.addEventListener("toggle", function (event) {
    if (event.target instanceof HTMLDetailsElement &&
        event.target.classList.contains("edit-arguments")) {
      syncEditors();
      var field = event.target.querySelector("textarea");
      if (field && event.target.open) field.focus();
    }
  }, true);
  document.addEventListener("input", function (event) {
    if (event.target instanceof HTMLTextAreaElement &&
        event.target.classList.contains("arguments-input")) {
      checkEdit(event.target);
    }
  });
  document.addEventListener("htmx:afterSettle", syncEditors);

  // Another approver's edit arrives in a push of the status panel, with the new digest: the
  // arguments and the form on this page are the earlier version's, so say so (approving
  // them would be refused as stale).
  document.addEventListener("htmx:wsAfterMessage", function () {
    var live = document.querySelector(".live[data-arguments-sha256]");
    var shown = document.querySelector(".decision input[name='arguments_sha256']");
    var notice = document.getElementById("notice");
    if (!live || !shown || !notice) return;
    if (live.dataset.argumentsSha256 !== shown.value) {
      notice.textContent = "The arguments were edited since this page was shown: reload it to " +
        "see and decide the new version.";
      notice.hidden = false;
    }
  });

  // --- Deciding many at once (the queue) -------------------------------------------------------
  // A push replaces changed rows, checkboxes included, or the whole queue: the selection is
  // kept here, by each checkbox's value (<call id>:<digest of the arguments shown>), and applied
  // again after each push. A selected call that left the queue meanwhile (another approver decided it), or whose
  // arguments were edited (its row now carries a new digest), stays selected as a hidden field
  // with the digest that was shown: the server then reports why it was not decided, and never
  // decides arguments nobody saw.

  var picked = new Set();
  var focused = null; // the focused row's id and which of its parts, kept across a push

  function picks() {
    return Array.prototype.slice.call(document.querySelectorAll("#queue input.pick"));
  }

  function syncPicks() {
    var boxes = picks();
    var present = new Set();
    boxes.forEach(function (box) {
      present.add(box.value);
      box.checked = picked.has(box.value);
    });
    var gone = [];
    picked.forEach(function (value) {
      if (!present.has(value)) gone.push(value);
    });
    var holder = document.getElementById("picked-gone");
    if (holder) {
      holder.replaceChildren.apply(holder, gone.map(function (value) {
        var input = document.createElement("input");
        input.type = "hidden";
        input.name = "call";
        input.value = value;
        return input;
      }));
    }
    var shown = boxes.filter(function (box) { return box.checked; }).length;
    var all = document.getElementById("pick-all");
    if (all) {
      all.checked = shown > 0 && shown === boxes.length;
      all.indeterminate = shown > 0 && shown < boxes.length;
      all.disabled = boxes.length === 0 && picked.size === 0;
    }
    var count = document.getElementById("picked");
    if (count) {
      count.textContent = picked.size
        ? picked.size + " selected" + (gone.length ? " (" + gone.length + " no longer in the queue)" : "")
        : "";
    }
    document.querySelectorAll("#batch button[name='verb']").forEach(function (button) {
      button.disabled = picked.size === 0;
    });
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (!(target instanceof HTMLInputElement)) return;
    if (target.classList.contains("pick")) {
      if (target.checked) picked.add(target.value);
      else picked.delete(target.value);
      syncPicks();
    } else if (target.id === "pick-all") {
      if (target.checked) picks().forEach(function (box) { picked.add(box.value); });
      else picked.clear();
      syncPicks();
    }
  });

  document.addEventListener("htmx:wsBeforeMessage", function () {
    var active = document.activeElement;
    var row = active && active.closest ? active.closest("#queue .row") : null;
    focused = row ? { id: row.id, pick: active.classList.contains("pick") } : null;
  });

  function restoreFocus() {
    if (!focused) return;
    var row = document.getElementById(focused.id);
    var part = row && row.querySelector(focused.pick ? "input.pick" : ".row-link");
    focused = null;
    if (part && document.activeElement !== part) part.focus({ preventScroll: true });
  }

  // After a batch: its report is shown (the decided rows leave with the socket's next push);
  // start afresh.
  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.detail.elt;
    if (!form || form.id !== "batch" || !event.detail.successful) return;
    picked.clear();
    var comment = document.getElementById("batch-comment");
    if (comment) comment.value = "";
    syncPicks();
  });

  function togglePick() {
    var active = document.activeElement;
    var row = active && active.closest ? active.closest("#queue .row") : null;
    var box = row && row.querySelector("input.pick");
    if (!box) return false;
    box.checked = !box.checked;
    box.dispatchEvent(new Event("change", { bubbles: true }));
    return true;
  }

  // --- Keyboard ------------------------------------------------------------------------------
  // Call page: a / d move the focus to Approve / Deny (Enter then decides, so a stray key never
  // does), c to the comment. Queue: j / k move between rows, x selects the focused row.
  // Escape leaves a text field.

  function typing(target) {
    return target instanceof HTMLElement &&
      (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName)) &&
      !(target instanceof HTMLInputElement && target.type === "checkbox");
  }

  function focusRow(step) {
    var links = Array.prototype.slice.call(document.querySelectorAll("#queue .row-link"));
    if (!links.length) return;
    var index = links.indexOf(document.activeElement);
    var next = index < 0 ? (step > 0 ? 0 : links.length - 1) : index + step;
    next = Math.max(0, Math.min(links.length - 1, next));
    links[next].focus();
  }

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && typing(event.target)) {
      event.target.blur();
      return;
    }
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(event.target)) return;
    var target = null;
    if (event.key === "a") target = document.querySelector(".decision button[data-key='a']");
    else if (event.key === "d") target = document.querySelector(".decision button[data-key='d']");
    else if (event.key === "c") target = document.querySelector(".decision textarea");
    else if (event.key === "j") { focusRow(1); event.preventDefault(); return; }
    else if (event.key === "k") { focusRow(-1); event.preventDefault(); return; }
    else if (event.key === "x") { if (togglePick()) event.preventDefault(); return; }
    if (target) {
      event.preventDefault();
      target.focus();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    syncTitle();
    syncPicks();
    syncEditors();
    tick();
    window.setInterval(tick, 1000);
  });
})();
