// The chat page of a session (runs/views/chat.py), hand-written (no build step). The page
// works without it: every action is a form that posts and comes back; this script makes
// the page follow the session live and sends the forms without leaving the page.
//
// The server rendered every event up to id N (#chat[data-last-event]); the script follows
// the session's event stream (Server-Sent Events, runs/sse.py) from N, so nothing is
// shown twice or missed. Events are applied one at a time, in order:
//   - a piece of the answer is appended to the turn's last item when that item is the
//     same model call's answer;
//   - any other event redraws its turn, folded by the server up to that event's id, and
//     the toolbar and the queue as they are now.
// The browser's EventSource reconnects by itself and sends the last id it received
// (Last-Event-ID), so a lost connection resumes where it was; a reload renders again.
(function () {
  "use strict";

  var TYPES = [
    "ready", "queued", "processing", "assistant_chunk", "tool_call", "tool_output", "approval_required",
    "approval_decided", "approve_all", "repeated_action", "turn_complete", "error", "interrupted", "compacted",
    "undone", "closed",
  ];

  var root = null;
  var last = 0;
  var source = null;
  var pending = Promise.resolve();
  var retryTimer = null;
  var generation = 0; // one per stream opened: events of a stream given up are dropped

  function showConnection(state, text) {
    var badge = document.getElementById("chat-connection");
    if (badge) { badge.dataset.state = state; badge.textContent = text; }
  }

  function showNotice(text, kind) {
    var notice = document.getElementById("chat-notice");
    if (!notice) return;
    notice.textContent = text;
    notice.className = "chat-notice message message-" + (kind || "error");
    notice.hidden = !text;
  }

  // Swap each element of `html` in for the page's element with its id; a turn the page
  // does not have yet is added at the end of the conversation.
  function swapIn(html) {
    var template = document.createElement("template");
    template.innerHTML = html;
    Array.from(template.content.children).forEach(function (piece) {
      if (!piece.id) return;
      var current = document.getElementById(piece.id);
      if (current) {
        keepOpenState(current, piece);
        current.replaceWith(piece);
      } else if (piece.classList.contains("chat-turn")) {
        var empty = document.getElementById("chat-no-turns");
        if (empty) empty.remove();
        document.getElementById("chat-turns").appendChild(piece);
        piece.scrollIntoView({ block: "nearest" });
      }
    });
    syncComposer();
  }

  // A redrawn turn keeps what the person was doing in it: an open "Edit, then approve"
  // with the arguments being typed, and a rejection's reason.
  function keepOpenState(current, piece) {
    current.querySelectorAll("textarea[id], input[type=text][id]").forEach(function (field) {
      var twin = piece.querySelector("#" + CSS.escape(field.id));
      if (twin && field.value !== field.defaultValue) twin.value = field.value;
    });
    current.querySelectorAll("details[open]").forEach(function (details, index) {
      var twins = piece.querySelectorAll("details");
      if (twins[index]) twins[index].open = true;
    });
  }

  function syncComposer() {
    var toolbar = document.getElementById("chat-toolbar");
    var closed = toolbar && toolbar.dataset.status === "closed";
    ["chat-message", "chat-send"].forEach(function (id) {
      var element = document.getElementById(id);
      if (element) element.disabled = closed;
    });
    if (closed) {
      var message = document.getElementById("chat-message");
      if (message) message.placeholder = "This session is closed.";
    }
  }

  function refresh(run, upto) {
    var url = root.dataset.liveUrl + "?upto=" + encodeURIComponent(upto) + (run ? "&run=" + encodeURIComponent(run) : "");
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(function (response) {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.text();
    }).then(swapIn);
  }

  function appendChunk(data) {
    var turn = document.getElementById("chat-turn-" + data.run);
    var items = turn ? turn.querySelector(".chat-items") : null;
    var lastItem = items ? items.lastElementChild : null;
    if (!lastItem || !lastItem.classList.contains("chat-answer") || lastItem.dataset.answerStep !== String(data.step)) {
      return false;
    }
    lastItem.querySelector(".chat-text").append(document.createTextNode(data.text || ""));
    return true;
  }

  function apply(type, id, data) {
    if (id <= last) return Promise.resolve(); // already shown
    var done;
    if (type === "assistant_chunk" && appendChunk(data)) done = Promise.resolve();
    else done = refresh(data.run || null, id);
    return done.then(function () {
      last = id;
      root.dataset.lastEvent = String(id);
    });
  }

  function receive(event) {
    var id = Number(event.lastEventId);
    var data;
    try { data = JSON.parse(event.data); } catch (error) { return; }
    var from = generation;
    pending = pending.then(function () {
      if (from === generation) return apply(event.type, id, data);
    }).catch(function () {
      // The page could not fetch a redraw (the server is away): drop what this stream
      // still brings and start again from the last event applied.
      if (from === generation) reconnect();
    });
  }

  function connect() {
    if (source) source.close();
    source = new EventSource(root.dataset.eventsUrl + "?last_event_id=" + encodeURIComponent(last));
    TYPES.forEach(function (type) { source.addEventListener(type, receive); });
    source.onopen = function () { showConnection("open", "Live"); };
    source.onerror = function () {
      // EventSource retries by itself unless the server refused the stream (then it closes).
      if (source.readyState === EventSource.CLOSED) reconnect();
      else showConnection("retrying", "Reconnecting…");
    };
  }

  function reconnect() {
    generation += 1;
    showConnection("retrying", "Reconnecting…");
    if (source) source.close();
    clearTimeout(retryTimer);
    retryTimer = setTimeout(connect, 3000);
  }

  // --- Actions: the forms, sent without leaving the page -------------------------------

  function send(form, submitter) {
    var body = new FormData(form);
    if (submitter && submitter.name) body.append(submitter.name, submitter.value);
    var buttons = form.querySelectorAll("button");
    buttons.forEach(function (button) { button.disabled = true; });
    return fetch(form.action, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    }).then(function (response) {
      return response.json().catch(function () { return null; }).then(function (answer) {
        if (response.ok) {
          showNotice("");
          if (form.id === "chat-composer") form.reset();
          return;
        }
        var message = answer && answer.error ? answer.error.message : "the action was refused (HTTP " + response.status + ")";
        showNotice(message.charAt(0).toUpperCase() + message.slice(1));
      });
    }, function () {
      showNotice("The platform could not be reached; nothing was sent.");
    }).then(function () {
      buttons.forEach(function (button) { button.disabled = false; });
      syncComposer();
      // Some actions change only the session's state, not its stream (compact): redraw it.
      pending = pending.then(function () { return refresh(null, last); }).catch(function () {});
    });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!root || !form.matches("form[data-chat-action]") || event.defaultPrevented) return;
    event.preventDefault();
    send(form, event.submitter);
  });

  document.addEventListener("keydown", function (event) {
    if (event.target.id === "chat-message" && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
  });

  function start() {
    root = document.getElementById("chat");
    if (!root) return;
    last = Number(root.dataset.lastEvent) || 0;
    var turns = document.getElementById("chat-turns");
    if (turns && turns.lastElementChild) turns.lastElementChild.scrollIntoView({ block: "nearest" });
    connect();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
