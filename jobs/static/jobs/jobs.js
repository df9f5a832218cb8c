// The jobs pages' behaviours, hand-written (no build step); pages load it instead of
// inline script, which the Content-Security-Policy refuses (docs/operations.md).

// A job's status event re-fetches its row here; the list has no use for the status
// block and log lines the event carries (they are for the job's own page).
(function () {
  if (!document.querySelector(".jobs-list-page")) return;
  document.body.addEventListener("htmx:wsBeforeMessage", function (event) {
    var found = /id="job-(\d+)-(status|log)"/.exec(event.detail.message || "");
    if (!found) return;
    event.preventDefault();
    var row = document.getElementById("job-row-" + found[1]);
    if (found[2] === "status" && row && window.htmx) {
      htmx.ajax("GET", row.dataset.rowUrl, { target: row, swap: "outerHTML" });
    }
  });
})();

// A job's page: the live log tail and the GPU chart.
(function () {
  "use strict";
  var page = document.querySelector(".job-page[data-job-id]");
  var log = page && document.getElementById("job-" + page.dataset.jobId + "-log");
  if (!log) return;
  var KEEP_LINES = 5000;

  // The tail follows new lines while it is scrolled to the bottom, and stays put
  // while someone reads further up.
  var following = true;
  function atBottom() { return log.scrollTop + log.clientHeight >= log.scrollHeight - 8; }
  log.addEventListener("scroll", function () { following = atBottom(); });

  // Lines arrive appended by the socket; one rendered with the page may arrive again
  // (written while the page loaded), and a reconnect redraws the tail: keep each line
  // number once, in order, and at most KEEP_LINES of them.
  function tidy() {
    var seen = -1, lines = log.querySelectorAll(".log-line");
    for (var i = 0; i < lines.length; i++) {
      var number = Number(lines[i].dataset.number);
      if (number <= seen) lines[i].remove(); else seen = number;
    }
    var extra = log.querySelectorAll(".log-line").length - KEEP_LINES;
    for (var j = 0; j < extra; j++) log.firstElementChild.remove();
    if (following) log.scrollTop = log.scrollHeight;
  }
  new MutationObserver(tidy).observe(log, { childList: true });
  log.scrollTop = log.scrollHeight;

  // The GPU chart: drawn from the page's data, redrawn every 10 s while the job runs.
  var COLORS = { muted: "#5d6574", grid: "#e2e5ea" };
  function draw(data) {
    var chart = document.getElementById("job-gpu-chart");
    var empty = document.getElementById("job-gpu-empty");
    if (!data.gpus.length || !window.Plotly) return;
    chart.hidden = false; empty.hidden = true;
    var traces = [];
    data.gpus.forEach(function (gpu) {
      traces.push({ type: "scatter", mode: "lines", name: "GPU " + gpu.gpu + " utilisation", x: gpu.at, y: gpu.utilization,
                    hovertemplate: "GPU " + gpu.gpu + ": %{y:.0f}%<extra></extra>" });
      traces.push({ type: "scatter", mode: "lines", name: "GPU " + gpu.gpu + " memory", x: gpu.at, y: gpu.memory, yaxis: "y2",
                    line: { dash: "dot" }, hovertemplate: "GPU " + gpu.gpu + ": %{y:.0f} MiB<extra></extra>" });
    });
    Plotly.react(chart, traces, {
      margin: { l: 48, r: 64, t: 8, b: 36 }, height: 300,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { family: getComputedStyle(document.body).fontFamily, size: 12, color: COLORS.muted },
      xaxis: { type: "date", gridcolor: COLORS.grid },
      yaxis: { title: { text: "utilisation %" }, range: [0, 100], gridcolor: COLORS.grid },
      yaxis2: { title: { text: "memory MiB" }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false },
      legend: { orientation: "h", y: -0.2 },
    }, { displayModeBar: false, responsive: true });
  }
  function start() {
    var data = JSON.parse(document.getElementById("job-gpu-data").textContent);
    draw(data);
    if (data.ended) return;
    var timer = setInterval(function () {
      fetch(document.getElementById("job-gpu-chart").dataset.metricsUrl, { headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (fresh) { if (!fresh) return; draw(fresh); if (fresh.ended) clearInterval(timer); })
        .catch(function () {});
    }, 10000);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
