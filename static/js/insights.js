// The insights page's charts (templates/approvals/insights.html): each drawn by Chart.js
// (static/vendor/chart.js/) into its canvas from the page's "insights-charts" data, which the
// tables beside them show too. No inline script: the Content-Security-Policy forbids it.
(function () {
  "use strict";

  function cssColor(name, fallback) {
    var value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  function draw(id, spec) {
    var canvas = document.getElementById("chart-" + id);
    if (!canvas || !spec.labels.length) {
      if (canvas) canvas.parentElement.hidden = true; // the table says there is nothing
      return;
    }
    var horizontal = Boolean(spec.horizontal);
    var valueAxis = horizontal ? "x" : "y";
    var scales = { x: { stacked: Boolean(spec.stacked) }, y: { stacked: Boolean(spec.stacked) } };
    scales[valueAxis].beginAtZero = true;
    scales[valueAxis].title = { display: true, text: spec.axis };
    if (spec.whole) scales[valueAxis].ticks = { precision: 0 }; // counts: no 0.5 of a call
    if (spec.most) scales[valueAxis].suggestedMax = spec.most;
    new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: spec.labels,
        datasets: spec.series.map(function (series) {
          return {
            label: series.name,
            data: series.values,
            backgroundColor: cssColor(series.tone, "#888888"),
            maxBarThickness: 48,
          };
        }),
      },
      options: {
        indexAxis: horizontal ? "y" : "x",
        animation: false,
        maintainAspectRatio: false,
        scales: scales,
        plugins: { legend: { display: spec.series.length > 1 } },
      },
    });
  }

  function start() {
    var data = document.getElementById("insights-charts");
    if (!data || !window.Chart) return;
    window.Chart.defaults.color = cssColor("muted", "#5f6b6f");
    window.Chart.defaults.borderColor = cssColor("line", "#dde2dd");
    var charts = JSON.parse(data.textContent);
    Object.keys(charts).forEach(function (id) {
      draw(id, charts[id]);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
