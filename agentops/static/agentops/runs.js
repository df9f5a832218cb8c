// The runs pages' small behaviours, hand-written (no build step). Every page works
// without it: the tree is just fully expanded, the sort applies on "Apply", and the
// dashboard shows its totals without charts.
(function () {
  "use strict";

  // --- The step tree: collapse, expand, the selected step --------------------------------

  var collapsed = new Set(); // step ids, kept across live re-renders of the tree
  // A page drawn with a step selected (?step=, a citation's link): that step stays
  // selected when a live update or a panel's swap re-renders the tree. (The script is
  // deferred: the page is parsed when this runs.)
  var drawnSelected = document.querySelector("#run-steps .trace-row.is-selected");
  var selectedStep = drawnSelected ? drawnSelected.dataset.stepId : null;

  function depthOf(row) {
    return Number(row.dataset.depth || 0);
  }

  // Hide the rows below `row` when it is collapsed; when expanded, show them again
  // except those inside a sub-tree that is itself collapsed.
  function applyCollapse(row) {
    var depth = depthOf(row);
    var isCollapsed = row.classList.contains("is-collapsed");
    var hideDeeperThan = Infinity;
    for (var next = row.nextElementSibling; next && depthOf(next) > depth; next = next.nextElementSibling) {
      var nextDepth = depthOf(next);
      if (nextDepth <= hideDeeperThan) hideDeeperThan = Infinity;
      next.hidden = isCollapsed || nextDepth > hideDeeperThan;
      if (!isCollapsed && !next.hidden && next.classList.contains("is-collapsed")) hideDeeperThan = nextDepth;
    }
  }

  function setCollapsed(row, value) {
    row.classList.toggle("is-collapsed", value);
    var toggle = row.querySelector(".trace-toggle");
    if (toggle) {
      toggle.setAttribute("aria-expanded", String(!value));
      toggle.textContent = value ? "▸" : "▾";
    }
    if (value) collapsed.add(row.dataset.stepId);
    else collapsed.delete(row.dataset.stepId);
    applyCollapse(row);
  }

  function markSelected(root) {
    (root || document).querySelectorAll(".trace-row.is-selected").forEach(function (row) {
      if (row.dataset.stepId !== selectedStep) row.classList.remove("is-selected");
    });
    if (!selectedStep) return;
    var row = document.getElementById("step-row-" + selectedStep);
    if (row) row.classList.add("is-selected");
  }

  // After a live update re-rendered the tree, put back what the person had chosen.
  function restoreTree() {
    var tree = document.getElementById("run-steps");
    if (!tree) return;
    tree.querySelectorAll(".trace-row").forEach(function (row) {
      if (collapsed.has(row.dataset.stepId) && row.querySelector(".trace-toggle")) {
        row.classList.add("is-collapsed");
        var toggle = row.querySelector(".trace-toggle");
        toggle.setAttribute("aria-expanded", "false");
        toggle.textContent = "▸";
      }
    });
    tree.querySelectorAll(".trace-row.is-collapsed").forEach(function (row) {
      if (!row.hidden) applyCollapse(row);
    });
    markSelected(tree);
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    var toggle = target.closest(".trace-toggle");
    if (toggle) {
      var row = toggle.closest(".trace-row");
      setCollapsed(row, !row.classList.contains("is-collapsed"));
      return;
    }
    var action = target.closest("[data-action]");
    if (action && (action.dataset.action === "collapse-all" || action.dataset.action === "expand-all")) {
      var collapse = action.dataset.action === "collapse-all";
      var rows = Array.from(document.querySelectorAll("#run-steps .trace-row"));
      rows.forEach(function (row) {
        if (row.querySelector(".trace-toggle")) {
          row.classList.toggle("is-collapsed", collapse);
          var button = row.querySelector(".trace-toggle");
          button.setAttribute("aria-expanded", String(!collapse));
          button.textContent = collapse ? "▸" : "▾";
          if (collapse) collapsed.add(row.dataset.stepId);
          else collapsed.delete(row.dataset.stepId);
        }
        row.hidden = collapse && depthOf(row) > 0;
      });
      return;
    }
    if (action && action.dataset.action === "close-step") {
      event.preventDefault();
      document.getElementById("step-panel").replaceChildren();
      selectedStep = null;
      markSelected();
      return;
    }
    var link = target.closest(".trace-link");
    if (link) {
      selectedStep = link.closest(".trace-row").dataset.stepId;
      markSelected();
    }
  });

  // --- Live updates --------------------------------------------------------------------

  // Every page of the project receives every live fragment (runs/live.py): new rows for
  // the list, refresh triggers for run pages. Drop, before htmx swaps them, the pieces
  // this page has no place for; htmx would otherwise log an error for each one.
  htmx.defineExtension("runs-live", {
    transformResponse: function (text, xhr) {
      if (xhr || text.charAt(0) !== "<") return text; // only WebSocket messages
      var template = document.createElement("template");
      template.innerHTML = text;
      var kept = Array.from(template.content.children).filter(function (piece) {
        var oob = piece.getAttribute("hx-swap-oob") || "true";
        var colon = oob.indexOf(":");
        var selector = colon > 0 ? oob.slice(colon + 1) : "#" + CSS.escape(piece.id);
        return piece.id || colon > 0 ? document.querySelector(selector) !== null : true;
      });
      return kept.map(function (piece) { return piece.outerHTML; }).join("");
    },
  });
  document.body.setAttribute("hx-ext", "runs-live");

  document.addEventListener("htmx:wsAfterMessage", function () {
    // A run created between the page's query and its socket opening can arrive twice.
    var seen = new Set();
    document.querySelectorAll("#runs-table > tbody[id]").forEach(function (body) {
      if (seen.has(body.id)) body.remove();
      else seen.add(body.id);
    });
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    restoreTree();
    var panel = document.getElementById("step-panel");
    if (panel && event.target === panel) {
      var detail = panel.querySelector(".step-detail");
      if (detail) {
        selectedStep = detail.dataset.stepId;
        markSelected();
      }
    }
  });
  document.addEventListener("htmx:oobAfterSwap", restoreTree);

  // --- A running run's duration ticks ------------------------------------------------------

  // The header says how long the run has gone on when it was drawn (data-elapsed-ms);
  // between live updates (a model may stream for seconds without one) the time keeps
  // going here, from the page's own clock, so a browser clock set wrong does not matter.
  // Each new header (a live update) brings the server's figure again.
  var clock = { element: null, base: 0, since: 0, timer: null };

  function formatDuration(ms) {
    // As the duration template filter writes it (runs/templatetags/runs_format.py).
    if (ms < 1000) return Math.round(ms) + " ms";
    var seconds = ms / 1000;
    if (seconds < 60) return seconds < 10 ? seconds.toFixed(2) + " s" : seconds.toFixed(1) + " s";
    var minutes = Math.floor(seconds / 60);
    seconds = Math.floor(seconds % 60);
    if (minutes < 60) return minutes + "m " + String(seconds).padStart(2, "0") + "s";
    return Math.floor(minutes / 60) + "h " + String(minutes % 60).padStart(2, "0") + "m";
  }

  function tick() {
    if (!clock.element || !clock.element.isConnected) startClock();
    if (!clock.element) return;
    var value = clock.element.querySelector(".run-duration-value");
    if (value) value.textContent = formatDuration(clock.base + performance.now() - clock.since);
  }

  function startClock() {
    var element = document.querySelector("#run-duration[data-elapsed-ms]");
    if (element === clock.element) return;
    clock.element = element;
    if (!element) {
      clearInterval(clock.timer);
      clock.timer = null;
      return;
    }
    clock.base = Number(element.dataset.elapsedMs) || 0;
    clock.since = performance.now();
    if (clock.timer === null) clock.timer = setInterval(tick, 250);
  }

  document.addEventListener("htmx:oobAfterSwap", startClock);
  document.addEventListener("htmx:afterSettle", startClock);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", startClock);
  else startClock();

  // --- The runs list's sort applies at once ------------------------------------------------

  document.addEventListener("change", function (event) {
    if (event.target.matches("#runs-filters select[name=sort]")) event.target.form.requestSubmit();
  });

  // --- The dashboard's charts --------------------------------------------------------------

  var COLORS = { accent: "#4f46e5", danger: "#c2293a", success: "#1a7f4b", muted: "#5d6574", grid: "#e2e5ea" };

  function layout(extra) {
    var base = {
      margin: { l: 48, r: 12, t: 8, b: 36 },
      height: 240,
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { family: getComputedStyle(document.body).fontFamily, size: 12, color: COLORS.muted },
      xaxis: { gridcolor: COLORS.grid, zeroline: false },
      yaxis: { gridcolor: COLORS.grid, zeroline: false, rangemode: "tozero" },
      showlegend: false,
      bargap: 0.15,
    };
    return Object.assign(base, extra || {});
  }

  var CONFIG = { displayModeBar: false, responsive: true };

  function drawDashboard() {
    var source = document.getElementById("dashboard-data");
    if (!source || !window.Plotly) return;
    var data = JSON.parse(source.textContent);
    var half = data.bucket_ms / 2;
    var mid = data.buckets.map(function (bucket) {
      return new Date(new Date(bucket).getTime() + half).toISOString();
    });
    var timeAxis = { type: "date", range: data.range, gridcolor: COLORS.grid };
    var ok = data.runs.map(function (count, i) { return count - data.failed[i]; });

    Plotly.newPlot("chart-runs", [
      { type: "bar", x: mid, y: ok, width: data.bucket_ms * 0.8, name: "Not failed", marker: { color: COLORS.accent } },
      { type: "bar", x: mid, y: data.failed, width: data.bucket_ms * 0.8, name: "Failed", marker: { color: COLORS.danger } },
    ], layout({ barmode: "stack", xaxis: timeAxis, showlegend: true, legend: { orientation: "h", y: 1.12 } }), CONFIG);

    Plotly.newPlot("chart-errors", [
      { type: "scatter", mode: "lines+markers", x: mid, y: data.error_rate, line: { color: COLORS.danger, width: 2 },
        hovertemplate: "%{y:.1f}% failed<extra></extra>" },
    ], layout({ xaxis: timeAxis, yaxis: { gridcolor: COLORS.grid, ticksuffix: "%", rangemode: "tozero" } }), CONFIG);

    var models = data.cost_by_model;
    Plotly.newPlot("chart-cost-models", [
      { type: "bar", orientation: "h", y: models.models.slice().reverse(), x: models.cost.slice().reverse(),
        marker: { color: COLORS.accent }, hovertemplate: "%{y}: $%{x:.6f}<extra></extra>" },
    ], layout({ margin: { l: 150, r: 12, t: 8, b: 36 }, xaxis: { gridcolor: COLORS.grid, tickprefix: "$" },
                height: Math.max(160, 40 + 26 * models.models.length) }), CONFIG);

    Plotly.newPlot("chart-tokens", [
      { type: "bar", x: mid, y: data.tokens_per_run, width: data.bucket_ms * 0.8, marker: { color: "#9333ea" },
        hovertemplate: "%{y:,.0f} tokens per run<extra></extra>" },
    ], layout({ xaxis: timeAxis }), CONFIG);

    Plotly.newPlot("chart-latency", [
      { type: "histogram", x: data.latencies_ms.map(function (ms) { return ms / 1000; }), nbinsx: 40,
        marker: { color: COLORS.success }, hovertemplate: "%{x} s: %{y} runs<extra></extra>" },
    ], layout({ xaxis: { gridcolor: COLORS.grid, ticksuffix: " s", title: { text: "seconds" } } }), CONFIG);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawDashboard);
  else drawDashboard();
})();
