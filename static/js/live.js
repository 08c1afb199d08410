// Live pages over a websocket (run trace, inbox, run list). No inline script (CSP): markup opts in
// with data-live-socket="/ws/...". The server sends two kinds of frames:
//  - HTML with hx-swap-oob elements: swapped by htmx exactly like an htmx response;
//  - JSON: {"seq": n, "type": ...} run events (the page remembers the last seq and sends it on
//    every reconnect, so nothing is lost across reloads, drops or a restarted web process),
//    {"upsert": id, "into": selector, "html": ...} (replace the element with that id, or add it at
//    the top of the container), {"replace": id, "html": ...} (only when present), and
//    {"at": iso} (the server time of the frame; a reconnect asks for changes since then).
(function () {
  "use strict";
  const root = document.querySelector("[data-live-socket]");
  if (!root || !window.WebSocket) return;
  let delay = 500;

  function url() {
    const base = root.getAttribute("data-live-socket");
    const params = [];
    if (root.hasAttribute("data-live-seq")) params.push("last_seq=" + encodeURIComponent(root.getAttribute("data-live-seq")));
    if (root.hasAttribute("data-live-since")) params.push("since=" + encodeURIComponent(root.getAttribute("data-live-since")));
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    return scheme + window.location.host + base + (base.indexOf("?") >= 0 ? "&" : "?") + params.join("&");
  }

  function fromHtml(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  function place(frame) {
    const current = document.getElementById(frame.upsert || frame.replace);
    if (!current && frame.replace) return;
    const element = fromHtml(frame.html);
    if (!element) return;
    if (current) {
      if (current.contains(document.activeElement) && frame.keepFocused) return;
      current.replaceWith(element);
    } else {
      const container = document.querySelector(frame.into);
      if (!container) return;
      container.prepend(element);
    }
    if (window.htmx) window.htmx.process(element);
    const empty = document.getElementById("inbox-empty");
    const items = document.getElementById("inbox-items");
    if (empty && items) empty.classList.toggle("d-none", items.querySelector("[data-status='pending']") !== null);
  }

  function event(frame) {
    const last = parseInt(root.getAttribute("data-live-seq") || "0", 10);
    if (frame.seq <= last) return;
    root.setAttribute("data-live-seq", String(frame.seq));
    const log = document.querySelector("[data-live-events]");
    if (log) {
      const item = document.createElement("li");
      item.className = "list-group-item py-1 small";
      item.setAttribute("data-seq", String(frame.seq));
      item.textContent = "#" + frame.seq + " " + frame.type;
      log.prepend(item);
      while (log.children.length > 100) log.lastElementChild.remove();
    }
  }

  function connect() {
    const socket = new WebSocket(url());
    socket.addEventListener("open", function () { delay = 500; root.setAttribute("data-live-state", "open"); });
    socket.addEventListener("message", function (message) {
      const text = message.data;
      if (text.charAt(0) !== "{") {
        if (window.htmx) window.htmx.swap(root, text, { swapStyle: "none" });
        return;
      }
      const frame = JSON.parse(text);
      if (frame.at) root.setAttribute("data-live-since", frame.at);
      if (typeof frame.seq === "number") event(frame);
      if (frame.upsert || frame.replace) place(frame);
    });
    socket.addEventListener("close", function (closed) {
      root.setAttribute("data-live-state", "closed");
      if (closed.code === 4403) return;  // not allowed: do not retry
      window.setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    });
  }
  connect();
})();
