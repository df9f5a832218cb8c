// The billing page's charts: spend per day, stacked by model, project, agent or category,
// and the energy (Wh) and CO2e (g) estimate per day. The data is JSON in #billing-data
// (names already escaped for Plotly's label HTML).
(function () {
  "use strict";

  var COLORS = { muted: "#5d6574", grid: "#e2e5ea" };

  // The look both charts share (transparent, the page's font, dates along x, a legend
  // below); ``layout`` adds each chart's own margins, height and axes.
  function chartLayout(layout) {
    return Object.assign({
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { family: getComputedStyle(document.body).fontFamily, size: 12, color: COLORS.muted },
      xaxis: { type: "date", gridcolor: COLORS.grid },
      showlegend: true,
      legend: { orientation: "h", y: -0.15 },
    }, layout);
  }

  function draw() {
    var source = document.getElementById("billing-data");
    if (!source || !window.Plotly) return;
    var data = JSON.parse(source.textContent);
    var traces = data.series.map(function (series) {
      return { type: "bar", name: series.name, x: data.days, y: series.cost,
               hovertemplate: series.name + ": $%{y:.4f}<extra></extra>" };
    });
    Plotly.newPlot("chart-spend", traces, chartLayout({
      barmode: "stack",
      margin: { l: 56, r: 12, t: 8, b: 36 },
      height: 300,
      yaxis: { gridcolor: COLORS.grid, tickprefix: "$", rangemode: "tozero" },
    }), { displayModeBar: false, responsive: true });
    drawCarbon(data.carbon);
  }

  function drawCarbon(carbon) {
    if (!carbon || !document.getElementById("chart-carbon")) return;
    Plotly.newPlot("chart-carbon", [
      { type: "bar", name: "Energy (Wh)", x: carbon.days, y: carbon.energy_wh,
        hovertemplate: "%{y:.2f} Wh<extra></extra>" },
      { type: "scatter", mode: "lines+markers", name: "CO2e (g)", x: carbon.days, y: carbon.co2e_g, yaxis: "y2",
        hovertemplate: "%{y:.2f} g CO2e<extra></extra>" },
    ], chartLayout({
      margin: { l: 56, r: 56, t: 8, b: 36 },
      height: 260,
      yaxis: { gridcolor: COLORS.grid, ticksuffix: " Wh", rangemode: "tozero" },
      yaxis2: { overlaying: "y", side: "right", ticksuffix: " g", rangemode: "tozero", showgrid: false },
    }), { displayModeBar: false, responsive: true });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
