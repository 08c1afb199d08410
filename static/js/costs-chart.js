// Spend over time on the costs page: Chart.js (vendored) over the numbers the page embeds as JSON.
(function () {
  function draw() {
    const canvas = document.getElementById("spend-chart");
    const source = document.getElementById("spend-data");
    if (!canvas || !source || typeof Chart === "undefined") return;
    const data = JSON.parse(source.textContent);
    const existing = Chart.getChart(canvas);
    if (existing) existing.destroy();
    new Chart(canvas, {
      data: {
        labels: data.labels,
        datasets: [
          {type: "bar", label: "Known spend (USD)", data: data.cost, yAxisID: "usd", backgroundColor: "#206bc4"},
          {type: "line", label: "Calls at unknown price", data: data.unknown, yAxisID: "calls",
           borderColor: "#f59f00", backgroundColor: "#f59f00", tension: 0.2},
        ],
      },
      options: {
        responsive: true,
        maintainAspectRatio: true,
        aspectRatio: 3,
        animation: false,
        interaction: {mode: "index", intersect: false},
        scales: {
          usd: {type: "linear", position: "left", beginAtZero: true, title: {display: true, text: "USD"}},
          calls: {type: "linear", position: "right", beginAtZero: true, grid: {drawOnChartArea: false},
                  title: {display: true, text: "unknown-price calls"}, ticks: {precision: 0}},
        },
      },
    });
    canvas.setAttribute("data-drawn", String(data.labels.length));
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
})();
