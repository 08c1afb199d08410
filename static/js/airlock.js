// Dark mode toggle (Tabler themes via data-bs-theme), copy buttons, and the small behaviours the
// CSP keeps out of the markup (no inline handlers): data-confirm on forms, data-autosubmit on
// selects, data-remove-closest (and data-focus-after) on buttons, data-enter-does-not-submit on inputs.
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
  // A form a socket rendered (a live panel: Cancel, Re-run) was rendered without the page's request, so it has
  // no CSRF field: give every plain POST form the page's token (the one htmx sends as X-CSRFToken) on submit.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if ((form.method || "").toLowerCase() !== "post" || form.querySelector("input[name=csrfmiddlewaretoken]")) return;
    try {
      const token = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
      if (!token) return;
      const field = document.createElement("input");
      field.type = "hidden"; field.name = "csrfmiddlewaretoken"; field.value = token;
      form.appendChild(field);
    } catch (e) { /* no token on this page: the server refuses the post with its own message */ }
  }, true);
  document.addEventListener("submit", function (event) {
    const form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
  }, true);
  document.addEventListener("change", function (event) {
    if (event.target.matches("select[data-autosubmit]")) event.target.form.submit();
  });
  // Filters that would push the list below the fold start folded on a phone (open without script).
  if (window.matchMedia("(max-width: 767.98px)").matches) {
    document.querySelectorAll("details[data-collapse-on-phone]").forEach(function (d) { d.open = false; });
  }
  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && event.target.matches("[data-enter-does-not-submit]")) event.preventDefault();
  });
  document.addEventListener("click", function (event) {
    const remover = event.target.closest("[data-remove-closest]");
    if (remover) {
      const row = remover.closest(remover.getAttribute("data-remove-closest"));
      if (row) row.remove();
      // Keep the keyboard where it was: on the element named by data-focus-after (else nowhere new),
      // and let a picker that hides what is already chosen list the removed item again.
      const next = remover.getAttribute("data-focus-after");
      if (next && document.querySelector(next)) document.querySelector(next).focus();
      const picker = document.querySelector("[data-refresh-on-remove]");
      if (picker && window.htmx) window.htmx.trigger(picker, "change");
      return;
    }
  });
  // A live update that would replace an element while a request sent from inside it is still out (a decision's
  // POST: the inbox socket re-renders its card the moment the decision commits, before the POST's own answer is
  // back) waits for that answer. Replaced first, the answer found its card detached and swapped there, its
  // out-of-band outcome (which takes the keyboard) with it: lost. A good answer is as new as the update, which
  // is dropped; after a failed one the update is put in.
  const waitingUpdates = new Map();
  let socketMessage = false;  // only a socket's message waits (set below): a request's own answer swaps at once
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    const target = event.detail.target;
    if (!socketMessage || !target || !target.id || !target.querySelector(".htmx-request")) return;
    event.detail.shouldSwap = false;
    waitingUpdates.set(target.id, event.detail.fragment);
    target.setAttribute("data-update-waiting", "");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    const target = event.detail.target;
    if (!target || !target.id || !waitingUpdates.has(target.id)) return;
    const update = waitingUpdates.get(target.id);
    waitingUpdates.delete(target.id);
    const current = document.getElementById(target.id);
    if (!event.detail.successful && current && window.htmx) window.htmx.swap(current, update, {swapStyle: "outerHTML"});
  });
  // Content swapped in that names itself the next focus (a decision's outcome) takes the keyboard.
  document.addEventListener("htmx:afterSettle", function () {
    const next = document.querySelector("[data-focus-on-swap]");
    if (next) { next.removeAttribute("data-focus-on-swap"); next.focus(); }
  });
  // Live pages are htmx's ws extension alone: each element with ws-connect holds a socket whose messages are
  // partials swapped in by id. Mark each socket's element while it is open (data-live-state), and the body
  // while its org socket is, so people (and tests) can tell live updates work.
  document.addEventListener("htmx:wsOpen", function (event) {
    event.target.setAttribute("data-live-state", "open");
    if (event.target === document.body) document.body.setAttribute("data-live", "connected");
  });
  document.addEventListener("htmx:wsClose", function (event) {
    event.target.setAttribute("data-live-state", "closed");
    if (event.target === document.body) document.body.removeAttribute("data-live");
  });
  // A live update replaces whole items (the inbox socket re-sends every pending item when it connects):
  // what the person had ticked, chosen or typed in them and not yet sent is put back, as is the keyboard.
  // A control is matched by its item (the closest element with an id), name and value, so a ticked box
  // whose item now carries other arguments (another value) is not ticked again.
  function controlKey(el) {
    const owner = el.closest("[id]");
    const choice = (el.type === "checkbox" || el.type === "radio") ? el.value : "";
    return (owner ? owner.id : "") + "|" + (el.name || el.id) + "|" + choice;
  }
  // The control the person is in is put back under their cursor too (found by the same key, with the caret where
  // it was): otherwise what they type next goes to the page, where single keys are the inbox's shortcuts.
  function formControl(el) {
    return el && el.matches && el.matches("input, textarea, select") && el.type !== "hidden" && (el.name || el.id);
  }
  function caret(el) {
    try { return [el.selectionStart, el.selectionEnd]; } catch (e) { return null; }  // not a text control
  }
  let kept = null;
  document.addEventListener("htmx:wsBeforeMessage", function () {
    socketMessage = true;
    const active = document.activeElement;
    kept = {values: new Map(), focus: active && active.id, control: formControl(active) ? active : null};
    if (kept.control) { kept.controlKey = controlKey(active); kept.caret = caret(active); }
    document.querySelectorAll("input, textarea, select").forEach(function (el) {
      if (!formControl(el)) return;
      const changed = (el.type === "checkbox" || el.type === "radio")
        ? el.checked !== el.defaultChecked : el.value !== el.defaultValue;
      if (changed) kept.values.set(controlKey(el), el.type === "checkbox" || el.type === "radio" ? el.checked : el.value);
    });
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    socketMessage = false;
    if (!kept) return;
    const before = kept;
    kept = null;
    if (before.values.size) {
      document.querySelectorAll("input, textarea, select").forEach(function (el) {
        const key = controlKey(el);
        if (!before.values.has(key)) return;
        if (el.type === "checkbox" || el.type === "radio") el.checked = before.values.get(key);
        else el.value = before.values.get(key);
      });
    }
    if (before.control && !before.control.isConnected) {  // the control they were in was replaced
      const again = Array.from(document.querySelectorAll("input, textarea, select"))
        .find(function (el) { return formControl(el) && controlKey(el) === before.controlKey; });
      if (again) {
        again.focus();
        if (before.caret && before.caret[0] !== null) {
          try { again.setSelectionRange(before.caret[0], before.caret[1]); } catch (e) { /* not a text control */ }
        }
        return;
      }
    }
    if (before.focus && document.activeElement === document.body) {
      const again = document.getElementById(before.focus);
      if (again) again.focus();
    }
  });
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
