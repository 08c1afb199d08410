// The crew editor: show the section of the chosen process, reorder tasks by drag or arrows, remove rows.
// Delegated from document so it keeps working after htmx swaps the form.
(function () {
  document.addEventListener("change", function (event) {
    if (event.target.name !== "process") return;
    const form = event.target.closest("form");
    form.querySelectorAll("[data-process-section]").forEach(function (section) {
      section.hidden = section.getAttribute("data-process-section") !== event.target.value;
    });
  });
  document.addEventListener("click", function (event) {
    const move = event.target.closest("[data-move]");
    if (move) {
      const row = move.closest(".task-row");
      if (move.getAttribute("data-move") === "up" && row.previousElementSibling) {
        row.parentNode.insertBefore(row, row.previousElementSibling);
      } else if (move.getAttribute("data-move") === "down" && row.nextElementSibling) {
        row.parentNode.insertBefore(row.nextElementSibling, row);
      }
      return;
    }
    const remove = event.target.closest("[data-remove-row]");
    if (remove) remove.closest(".task-row, .input-row").remove();
  });
  let dragged = null;
  document.addEventListener("dragstart", function (event) {
    dragged = event.target.closest && event.target.closest(".task-row");
    if (dragged) event.dataTransfer.effectAllowed = "move";
  });
  document.addEventListener("dragover", function (event) {
    const over = event.target.closest && event.target.closest(".task-row");
    if (!dragged || !over || over === dragged || over.parentNode !== dragged.parentNode) return;
    event.preventDefault();
    const after = event.clientY > over.getBoundingClientRect().top + over.offsetHeight / 2;
    over.parentNode.insertBefore(dragged, after ? over.nextElementSibling : over);
  });
  document.addEventListener("dragend", function () { dragged = null; });
})();
