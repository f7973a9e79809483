// Desktop notifications on the queue: one for each new call this person may decide (a row
// of the queue with data-decidable), once they have allowed them with the queue's button;
// nothing is asked unprompted. The count in the tab title is countersign.js's (syncTitle).
// No inline script anywhere (the Content-Security-Policy forbids it).
(function () {
  "use strict";

  var MUTED_KEY = "countersign.notifications.muted"; // turned off here, though allowed
  var MAX_AT_ONCE = 3; // more new calls than this in one push: one notification says how many

  var supported = "Notification" in window;
  var known = null; // ids of the decidable rows already seen; null until the page has rows
  var shownCount = 0; // the "for you to decide" count last seen

  function muted() {
    try {
      return window.localStorage.getItem(MUTED_KEY) === "1";
    } catch (error) {
      return false;
    }
  }

  function setMuted(value) {
    try {
      if (value) window.localStorage.setItem(MUTED_KEY, "1");
      else window.localStorage.removeItem(MUTED_KEY);
    } catch (error) {
      // Storage refused (a private window): the choice lasts as long as the page.
    }
  }

  function enabled() {
    return supported && Notification.permission === "granted" && !muted();
  }

  // --- The offer on the queue ----------------------------------------------------------------

  function syncOffer() {
    var offer = document.getElementById("notify-offer");
    var button = document.getElementById("notify-toggle");
    var state = document.getElementById("notify-state");
    if (!offer || !button || !state) return;
    if (!supported) {
      offer.hidden = true;
      return;
    }
    offer.hidden = false;
    var permission = Notification.permission;
    if (permission === "denied") {
      button.hidden = true;
      state.textContent = "Desktop notifications are blocked for this site in the browser's settings.";
    } else if (enabled()) {
      button.hidden = false;
      button.textContent = "Turn off desktop notifications";
      state.textContent = "Desktop notifications are on for new calls you may decide.";
    } else {
      button.hidden = false;
      button.textContent = "Enable desktop notifications";
      state.textContent = "";
    }
    button.dataset.state = enabled() ? "on" : "off";
  }

  function toggle() {
    if (!supported) return;
    if (enabled()) {
      setMuted(true);
      syncOffer();
      return;
    }
    setMuted(false);
    if (Notification.permission === "granted") {
      syncOffer();
      return;
    }
    // Asked only here, on the person's click.
    var asked = Notification.requestPermission(function () { syncOffer(); });
    if (asked && typeof asked.then === "function") asked.then(syncOffer, syncOffer);
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (target instanceof HTMLElement && target.id === "notify-toggle") toggle();
  });

  // --- New calls to decide -------------------------------------------------------------------

  function text(element, selector) {
    var found = element.querySelector(selector);
    return found ? found.textContent.trim() : "";
  }

  function describe(row) {
    var amounts = Array.prototype.map.call(row.querySelectorAll(".amount"), function (amount) {
      return amount.textContent.trim();
    }).filter(Boolean);
    var tool = text(row, ".tool");
    var left = text(row, "time.countdown");
    var body = text(row, ".agent") + " for " + text(row, ".principal");
    if (left) body += " · " + left + " left";
    var link = row.querySelector("a.row-link");
    return {
      title: "To decide: " + tool + (amounts.length ? " " + amounts.join(", ") : ""),
      body: body,
      tag: "countersign-" + row.id,
      url: link ? link.getAttribute("href") : "/",
    };
  }

  function show(note) {
    var offer = document.getElementById("notify-offer");
    var icon = offer ? offer.dataset.icon : undefined;
    try {
      var shown = new Notification(note.title, { body: note.body, tag: note.tag, icon: icon });
      shown.onclick = function () {
        window.focus();
        window.location.assign(note.url);
        shown.close();
      };
    } catch (error) {
      // Some browsers (Android's) allow notifications from a service worker only.
    }
  }

  function decidableRows() {
    return Array.prototype.slice.call(document.querySelectorAll("#queue li.row[data-decidable]"));
  }

  function mineCount() {
    var count = parseInt(text(document, "#mine-count"), 10);
    return isNaN(count) ? 0 : count;
  }

  function check() {
    var queue = document.getElementById("queue");
    if (!queue) return;
    var rows = decidableRows();
    var count = mineCount();
    if (known === null) {
      // The page as loaded: nothing in it is new.
      known = new Set(rows.map(function (row) { return row.id; }));
      shownCount = count;
      return;
    }
    var fresh = rows.filter(function (row) { return !known.has(row.id); });
    var grew = count - shownCount;
    known = new Set(rows.map(function (row) { return row.id; }));
    shownCount = count;
    if (!enabled()) return;
    if (fresh.length > MAX_AT_ONCE) {
      show({
        title: fresh.length + " new calls to decide",
        body: "Countersign: " + count + " waiting for you.",
        tag: "countersign-many",
        url: "/",
      });
    } else if (fresh.length) {
      fresh.forEach(function (row) { show(describe(row)); });
    } else if (grew > 0) {
      // New calls beyond the rows the queue shows (it shows the oldest first).
      show({
        title: grew === 1 ? "A new call to decide" : grew + " new calls to decide",
        body: "Countersign: " + count + " waiting for you.",
        tag: "countersign-more",
        url: "/",
      });
    }
  }

  document.addEventListener("htmx:wsAfterMessage", check);
  document.addEventListener("htmx:afterSettle", check);
  document.addEventListener("DOMContentLoaded", function () {
    syncOffer();
    check();
  });
})();
