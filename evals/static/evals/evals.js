// The evaluation pages' behaviours, hand-written (no build step); pages load it instead
// of inline script, which the Content-Security-Policy refuses (docs/operations.md).
// Each part does nothing on a page without its elements.

// Show the chosen kind's example configuration, unless the text was already edited.
(function () {
  var kind = document.getElementById("id_kind");
  var config = document.getElementById("id_config");
  var help = document.getElementById("kind-help");
  if (!kind || !config) { return; }
  var examples = JSON.parse(document.getElementById("evaluator-examples").textContent);
  var helps = JSON.parse(document.getElementById("evaluator-kind-help").textContent);
  var shown = kind.value;
  kind.addEventListener("change", function () {
    var untouched = !config.value.trim() || config.value.trim() === (examples[shown] || "").trim();
    if (untouched) { config.value = examples[kind.value] || "{}"; }
    help.textContent = helps[kind.value] || "";
    shown = kind.value;
  });
})();

// The leaderboard's two charts of the chosen metric: one point per experiment with
// error bars from its 95% interval. Data: #leaderboard-data (names escaped for Plotly).
(function () {
  "use strict";
  var COLORS = { muted: "#5d6574", grid: "#e2e5ea", point: "#4f46e5" };

  function trace(points, x) {
    return {
      type: "scatter", mode: "markers",
      x: points.map(function (p) { return p[x]; }),
      y: points.map(function (p) { return p.mean; }),
      text: points.map(function (p) { return p.name; }),
      customdata: points.map(function (p) { return p.url; }),
      error_y: { type: "data", symmetric: false, color: COLORS.muted,
                 array: points.map(function (p) { return p.high - p.mean; }),
                 arrayminus: points.map(function (p) { return p.mean - p.low; }) },
      marker: { size: 9, color: COLORS.point },
      hovertemplate: "%{text}<br>%{y:.3f}<extra></extra>",
    };
  }

  function layout(xaxis) {
    return {
      margin: { l: 48, r: 12, t: 8, b: 40 }, height: 300,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: { family: getComputedStyle(document.body).fontFamily, size: 12, color: COLORS.muted },
      xaxis: Object.assign({ gridcolor: COLORS.grid }, xaxis),
      yaxis: { gridcolor: COLORS.grid, range: [0, 1.05], title: { text: "mean score" } },
      showlegend: false,
    };
  }

  function draw() {
    var source = document.getElementById("leaderboard-data");
    var select = document.getElementById("chart-metric");
    if (!source || !select || !window.Plotly) return;
    var points = JSON.parse(source.textContent).metrics[select.value] || [];
    var config = { displayModeBar: false, responsive: true };
    Plotly.react("chart-score-cost", [trace(points, "cost")], layout({ tickprefix: "$", title: { text: "total cost" }, rangemode: "tozero" }), config);
    Plotly.react("chart-score-time", [trace(points, "created")], layout({ type: "date" }), config);
    ["chart-score-cost", "chart-score-time"].forEach(function (id) {
      var chart = document.getElementById(id);
      if (chart.dataset.linked) return;
      chart.dataset.linked = "1";
      chart.on("plotly_click", function (event) { window.location = event.points[0].customdata; });
    });
  }

  function start() {
    var select = document.getElementById("chart-metric");
    if (!select || !document.getElementById("leaderboard-data")) return;
    select.addEventListener("change", function (event) {
      var url = new URL(window.location);
      url.searchParams.set("metric", event.target.value);
      history.replaceState(null, "", url);
      draw();
    });
    draw();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
