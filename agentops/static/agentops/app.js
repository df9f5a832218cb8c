// What every page shares, hand-written (no build step), loaded by base.html. Pages have
// no inline script nor inline event handlers: the Content-Security-Policy runs only the
// platform's own files (docs/operations.md), so small behaviours hang on data attributes:
//
//   <form data-confirm="Delete it?">      asks before the form is sent;
//   <select data-autosubmit>               sends its form when changed;
//   <button data-copy-target="element-id"> copies that element's text;
//   <div data-event-stream="/api/.../runs/7/events/"> follows a run's event stream: the
//       model's text into its [data-stream-text], tool calls into [data-stream-state],
//       and when the run ends fires "stream-ended" on it (its hx-trigger fetches it again);
//   <section data-swap-refusals>          shows a 400 answer to its htmx forms in place
//       (htmx swaps only 2xx by default): the form with its error.
(function () {
  "use strict";

  // The live connection's state, shown in the top bar; htmx's ws extension reconnects by itself.
  function showLive(state, title) {
    var badge = document.getElementById("live-status");
    if (badge) { badge.dataset.state = state; badge.title = title; badge.textContent = state === "open" ? "Live" : "Offline"; }
  }
  document.addEventListener("htmx:wsOpen", function () { showLive("open", "Live updates: connected"); });
  document.addEventListener("htmx:wsClose", function () { showLive("closed", "Live updates: disconnected, retrying"); });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.dataset ? form.dataset.confirm : null;
    if (question && !window.confirm(question)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  document.addEventListener("change", function (event) {
    var field = event.target;
    if (field.form && field.hasAttribute && field.hasAttribute("data-autosubmit")) field.form.requestSubmit();
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    var status = event.detail.xhr ? event.detail.xhr.status : 0;
    if (status === 400 && event.detail.elt.closest && event.detail.elt.closest("[data-swap-refusals]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  var ENDS = ["turn_complete", "error", "interrupted"];
  function follow(element) {
    if (element.dataset.streaming || !window.EventSource) return;
    element.dataset.streaming = "1";
    var source = new EventSource(element.dataset.eventStream);
    var text = element.querySelector("[data-stream-text]");
    var state = element.querySelector("[data-stream-state]");
    function say(message) { if (state) state.textContent = message; }
    source.addEventListener("processing", function () { say("The analyst is reading…"); });
    source.addEventListener("tool_call", function (event) {
      var data = JSON.parse(event.data);
      say("The analyst is reading with " + data.tool + "…");
    });
    source.addEventListener("assistant_chunk", function (event) {
      if (text) text.appendChild(document.createTextNode(JSON.parse(event.data).text));
      say("The analyst is answering…");
    });
    ENDS.forEach(function (name) {
      source.addEventListener(name, function () {
        source.close();
        if (!document.body.contains(element)) return;
        if (window.htmx) window.htmx.trigger(element, "stream-ended");
        else say("Answered: reload the page to see it with its links.");
      });
    });
  }
  function followAll(root) {
    if (!root || !root.querySelectorAll) return;
    if (root.matches && root.matches("[data-event-stream]")) follow(root);
    root.querySelectorAll("[data-event-stream]").forEach(follow);
  }
  document.addEventListener("DOMContentLoaded", function () { followAll(document.body); });
  document.addEventListener("htmx:load", function (event) { followAll(event.detail.elt); });

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-copy-target]") : null;
    if (!button) return;
    var target = document.getElementById(button.dataset.copyTarget);
    if (!target) return;
    function done(label) { button.textContent = label; setTimeout(function () { button.textContent = "Copy"; }, 2000); }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(target.textContent.trim()).then(function () { done("Copied"); }, function () { done("Select and copy"); });
    } else {
      // Plain HTTP (local development): select the text so Ctrl+C copies it.
      var range = document.createRange();
      range.selectNodeContents(target);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      done(document.execCommand && document.execCommand("copy") ? "Copied" : "Press Ctrl+C");
    }
  });
})();
