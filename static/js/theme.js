// Apply the saved theme before first paint (no flash). Loaded without defer in <head>.
document.documentElement.setAttribute("data-bs-theme",
  localStorage.getItem("airlock-theme") || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light"));
