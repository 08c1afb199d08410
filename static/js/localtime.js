// Times in the reader's own time zone. Every <time datetime="..."> keeps a relative text
// ("3 minutes ago", refreshed each minute) and gets the full local date and zone as its title;
// <time data-format="absolute"> shows the local date and time instead. Runs again after htmx swaps.
(function () {
  // (dateStyle/timeStyle cannot be combined with timeZoneName: name the fields instead)
  const absolute = new Intl.DateTimeFormat(undefined, {year: "numeric", month: "short", day: "numeric",
                                                       hour: "2-digit", minute: "2-digit", timeZoneName: "short"});
  const relative = new Intl.RelativeTimeFormat(undefined, {numeric: "auto"});
  const steps = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400], ["hour", 3600], ["minute", 60]];

  function relativeText(date) {
    const seconds = Math.round((date.getTime() - Date.now()) / 1000);
    if (Math.abs(seconds) < 45) return "just now";
    for (const [unit, size] of steps) {
      if (Math.abs(seconds) >= size || unit === "minute") return relative.format(Math.round(seconds / size), unit);
    }
  }

  function render(root) {
    root = root || document;
    const found = root.matches && root.matches("time[datetime]") ? [root] : root.querySelectorAll("time[datetime]");
    found.forEach(function (el) {
      const date = new Date(el.getAttribute("datetime"));
      if (isNaN(date)) return;
      el.title = absolute.format(date);
      el.textContent = el.dataset.format === "absolute" ? absolute.format(date) : relativeText(date);
      el.dataset.localised = "1";
    });
  }

  document.addEventListener("DOMContentLoaded", function () { render(document); });
  document.addEventListener("htmx:load", function (event) { render(event.target); });
  setInterval(function () { render(document); }, 60000);
})();
