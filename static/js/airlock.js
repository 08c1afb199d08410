// Dark mode toggle (Tabler themes via data-bs-theme) and copy buttons. Nothing else lives here.
(function () {
  const root = document.documentElement;
  const toggle = document.getElementById("theme-toggle");
  if (toggle) {
    toggle.addEventListener("click", function () {
      const next = root.getAttribute("data-bs-theme") === "dark" ? "light" : "dark";
      root.setAttribute("data-bs-theme", next);
      localStorage.setItem("airlock-theme", next);
    });
  }
  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-copy]");
    if (!button) return;
    const target = document.getElementById(button.getAttribute("data-copy"));
    if (target && navigator.clipboard) {
      navigator.clipboard.writeText(target.textContent.trim());
      button.textContent = "Copied";
    }
  });
})();
