// Inbox keyboard shortcuts (listed on the page): j / k next / previous item, x select it, a approve it,
// r reject it (first to its comment box). Ignored while typing in a field; a checkbox on the page turns them
// off (WCAG 2.1.4, character key shortcuts). No inline script (CSP).
(function () {
  "use strict";
  const STORE = "airlock.inbox-keys";
  const toggle = document.getElementById("inbox-keys-on");
  if (toggle) {
    try { toggle.checked = localStorage.getItem(STORE) !== "off"; } catch (e) { /* storage blocked: stay on */ }
    toggle.addEventListener("change", () => {
      try { localStorage.setItem(STORE, toggle.checked ? "on" : "off"); } catch (e) { /* not remembered */ }
    });
  }
  const enabled = () => !toggle || toggle.checked;
  const items = () => Array.from(document.querySelectorAll("#inbox-items [data-testid=approval]"));
  let current = -1;

  function focusItem(index) {
    const list = items();
    if (!list.length) return;
    current = Math.max(0, Math.min(index, list.length - 1));
    const item = list[current];
    list.forEach((el) => el.classList.remove("inbox-current"));
    item.classList.add("inbox-current");
    item.setAttribute("tabindex", "-1");
    item.focus();
    item.scrollIntoView({block: "nearest"});
  }

  function focused() {
    const active = document.activeElement && document.activeElement.closest("[data-testid=approval]");
    return active || items()[current] || null;
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || !enabled()) return;
    const target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    const list = items();
    if (!list.length) return;
    const item = focused();
    if (item) current = list.indexOf(item);
    if (event.key === "j") { focusItem(current + 1); event.preventDefault(); return; }
    if (event.key === "k") { focusItem(current < 0 ? 0 : current - 1); event.preventDefault(); return; }
    if (!item) return;
    if (event.key === "x") {
      const box = item.querySelector("[data-testid=select-item]");
      if (box) box.checked = !box.checked;
      event.preventDefault();
    } else if (event.key === "a") {
      const approve = item.querySelector("button[name=decision][value=approve]");
      if (approve) { approve.click(); event.preventDefault(); }
    } else if (event.key === "r") {
      const comment = item.querySelector("[data-testid=decide-form] input[name=comment]");
      const reject = item.querySelector("button[name=decision][value=reject]");
      if (comment && !comment.dataset.keyed) { comment.dataset.keyed = "1"; comment.focus(); }
      else if (reject) reject.click();
      event.preventDefault();
    }
  });

  // After a decision the card is swapped (htmx): keep the place, on the next item.
  document.addEventListener("htmx:afterSwap", () => { if (current >= 0) focusItem(current); });
})();
