// Primus web UI: live sections and log tails over server-sent events. The server renders and
// escapes every section; log lines are set as text, never parsed as markup.
"use strict";

function follow(url, handlers) {
  const source = new EventSource(url);
  for (const [name, handle] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => handle(event.data, source));
  }
  source.addEventListener("end", () => source.close());
  return source;
}

function replaceSections(data) {
  const sections = JSON.parse(data);
  for (const [id, html] of Object.entries(sections)) {
    const element = document.getElementById(id);
    if (element) element.innerHTML = html;
  }
  document.body.dataset.updated = String(Date.now());
}

function removeActions() {
  // The application ended: its kill, suspend and succeed forms have nothing left to act on.
  const actions = document.getElementById("actions");
  if (actions) actions.remove();
}

function tailLog(pre) {
  const keep = Number(pre.dataset.keep) || 5000;
  const state = document.getElementById("log-state");
  follow(pre.dataset.log, {
    lines: (data) => {
      const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 4;
      const fragment = document.createDocumentFragment();
      for (const line of JSON.parse(data)) {
        fragment.appendChild(document.createTextNode(line + "\n"));
      }
      pre.appendChild(fragment);
      while (pre.childNodes.length > keep) pre.removeChild(pre.firstChild);
      if (atBottom) window.scrollTo(0, document.body.scrollHeight);
    },
    end: () => { if (state) state.textContent = "the application has ended: this is all"; },
  });
}

function signInFromFragment() {
  // `primus ui` links carry the token after '#', which browsers never send to a server.
  const form = document.getElementById("login-form");
  const match = /^#token=(.+)$/.exec(window.location.hash);
  if (!form || !match) return;
  history.replaceState(null, "", window.location.pathname + window.location.search);
  form.elements.token.value = decodeURIComponent(match[1]);
  form.submit();
}

document.addEventListener("DOMContentLoaded", () => {
  for (const element of document.querySelectorAll("[data-live]")) {
    if (element.dataset.live) follow(element.dataset.live, { sections: replaceSections, end: removeActions });
  }
  const log = document.getElementById("log");
  if (log) tailLog(log);
  signInFromFragment();
});
