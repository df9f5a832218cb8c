// What every page shares, hand-written (no build step), loaded by base.html. Pages have
// no inline script nor inline event handlers: the Content-Security-Policy runs only the
// platform's own files (docs/operations.md), so small behaviours hang on data attributes:
//
//   <form data-confirm="Delete it?">      asks before the form is sent;
//   <select data-autosubmit>               sends its form when changed;
//   <button data-copy-target="element-id"> copies that element's text.
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
