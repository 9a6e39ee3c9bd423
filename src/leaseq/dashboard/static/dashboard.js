// leaseq dashboard: confirmations and live updates. No framework, no build step.
// Every value from the server goes into the page as text (textContent), never as HTML.
"use strict";

(function () {
  const body = document.body;
  const base = body.dataset.base || "";
  const refresh = Number(body.dataset.refresh || 2000);
  const page = body.dataset.page;
  const live = document.getElementById("live");

  // -- confirmations ----------------------------------------------------------------
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    const submitter = event.submitter;
    const text = (submitter && submitter.dataset.confirmText) || form.dataset.confirm;
    if (!window.confirm(text)) event.preventDefault();
  });

  const goJob = document.querySelector("[data-go-job]");
  if (goJob) {
    goJob.addEventListener("submit", (event) => {
      event.preventDefault();
      const id = goJob.querySelector("input[name=id]").value.trim();
      if (/^[0-9]+$/.test(id)) window.location.href = base + "/jobs/" + id;
    });
  }

  const selectAll = document.querySelector("[data-select-all]");
  if (selectAll) {
    selectAll.addEventListener("change", () => {
      document.querySelectorAll("input[name=ids]").forEach((box) => { box.checked = selectAll.checked; });
    });
  }

  // -- formatting ---------------------------------------------------------------------
  function age(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 120) return seconds.toFixed(1) + " s";
    if (seconds < 7200) return Math.round(seconds / 60) + " min";
    if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
    return (seconds / 86400).toFixed(1) + " d";
  }

  function show(el, value) {
    const format = el.dataset.format;
    if (format === "age") el.textContent = age(value);
    else if (format === "paused") el.textContent = value ? "paused" : "";
    else if (format === "paused-badge") el.hidden = !value;
    else if (format === "paused-until") {
      // A timed pause's end (ISO 8601, UTC), shown as the server renders it.
      el.hidden = !value;
      if (value) {
        const [whole, fraction = ""] = value.replace(/([+-]\d\d:\d\d|Z)$/, "").replace("T", " ").split(".");
        el.textContent = "until " + whole + "." + (fraction + "000").slice(0, 3) + " UTC";
      }
    }
    else el.textContent = value === null || value === undefined ? "–" : String(value);
  }

  function fill(root, data, attr) {
    const key = attr || "field";
    root.querySelectorAll("[data-" + key + "]").forEach((el) => {
      if (el.dataset[key] in data) show(el, data[el.dataset[key]]);
    });
  }

  function plot(svg, series, width, height) {
    const line = svg.querySelector("polyline");
    if (!line || series.length === 0) return;
    const top = Math.max(1, ...series);
    const step = series.length > 1 ? width / (series.length - 1) : width;
    line.setAttribute("points", series.map((v, i) =>
      (i * step).toFixed(1) + "," + (height - (v / top) * (height - 2) - 1).toFixed(1)).join(" "));
    svg.setAttribute("data-points", String(series.length));
    svg.setAttribute("aria-label", "finished per second, latest " + series[series.length - 1]);
  }

  function cell(text, cls) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    return td;
  }

  function link(href, text) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    return a;
  }

  // -- live updates -------------------------------------------------------------------
  async function getJSON(path) {
    const response = await fetch(base + path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (!response.ok) throw new Error(path + ": " + response.status);
    return response.json();
  }

  function queueRow(q) {
    const tr = document.createElement("tr");
    tr.dataset.queue = q.queue;
    const name = document.createElement("td");
    name.appendChild(link(base + "/queues/" + encodeURIComponent(q.queue), q.queue));
    tr.appendChild(name);
    for (const field of ["available", "scheduled", "running", "dead", "completed", "discarded"]) {
      const td = cell("", "num");
      td.dataset.field = field;
      tr.appendChild(td);
    }
    const oldest = cell("", "num");
    oldest.dataset.field = "oldest_available_age";
    oldest.dataset.format = "age";
    tr.appendChild(oldest);
    const paused = cell("");
    paused.dataset.field = "paused";
    paused.dataset.format = "paused";
    tr.appendChild(paused);
    const spark = document.createElement("td");
    spark.innerHTML = '<svg class="spark" viewBox="0 0 60 16" preserveAspectRatio="none"><polyline points=""/></svg>';
    tr.appendChild(spark);
    return tr;
  }

  async function updateOverview() {
    const data = await getJSON("/api/queues");
    fill(document.querySelector(".cards"), data.totals, "total");
    plot(document.getElementById("chart"), data.series, 300, 60);
    if (data.series.length) {
      const now = data.series[data.series.length - 1];
      document.getElementById("chart-now").textContent =
        "now " + now + ", peak " + Math.max(...data.series);
    }
    const tbody = document.querySelector("#queues tbody");
    const rows = new Map();
    tbody.querySelectorAll("tr[data-queue]").forEach((tr) => rows.set(tr.dataset.queue, tr));
    if (data.queues.length) tbody.querySelectorAll("tr.empty").forEach((tr) => tr.remove());
    for (const q of data.queues) {
      let tr = rows.get(q.queue);
      if (!tr) { tr = queueRow(q); tbody.appendChild(tr); }
      fill(tr, q);
      plot(tr.querySelector("svg"), q.series, 60, 16);
    }
  }

  function jobRow(job) {
    const tr = document.createElement("tr");
    tr.dataset.job = String(job.id);
    const id = document.createElement("td");
    id.appendChild(link(base + "/jobs/" + job.id, String(job.id)));
    tr.appendChild(id);
    const kind = cell(job.kind || "–");
    for (const tag of job.tags || []) {
      kind.append(" ");
      const a = link(base + "/queues/" + encodeURIComponent(job.queue) + "?tag=" +
                     encodeURIComponent(tag), tag);
      a.className = "tag mono";
      kind.appendChild(a);
    }
    tr.appendChild(kind);
    const state = document.createElement("td");
    const badge = document.createElement("span");
    badge.className = "state s-" + job.state;
    badge.textContent = job.state;
    state.appendChild(badge);
    tr.appendChild(state);
    tr.appendChild(cell(String(job.priority), "num"));
    tr.appendChild(cell(job.attempts + "/" + job.max_attempts, "num"));
    tr.appendChild(cell(job.created_at.replace("T", " ").slice(0, 23) + " UTC", "time"));
    const payload = typeof job.payload === "string" ? job.payload : JSON.stringify(job.payload);
    tr.appendChild(cell(payload.length > 160 ? payload.slice(0, 160) + "…" : payload, "mono clip"));
    const error = job.error_line || "";
    tr.appendChild(cell(error.length > 160 ? error.slice(0, 160) + "…" : error, "mono clip err"));
    return tr;
  }

  async function updateQueue() {
    const name = document.getElementById("queue-name").dataset.queue;
    const data = await getJSON("/api/queues/" + encodeURIComponent(name));
    fill(document.querySelector("main"), data.queue);
    const jobs = document.getElementById("jobs");
    if (jobs.dataset.liveJobs !== "true") return;
    const params = new URLSearchParams(window.location.search);
    params.set("queue", name);
    params.delete("after");
    const listing = await getJSON("/api/jobs?" + params.toString());
    const tbody = jobs.querySelector("tbody");
    tbody.replaceChildren(...listing.jobs.map(jobRow));
    if (!listing.jobs.length) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = cell("No jobs here.");
      td.colSpan = 10;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
  }

  async function updateJob() {
    const id = document.getElementById("job").dataset.job;
    const data = await getJSON("/api/jobs/" + id);
    fill(document.querySelector("main"), data.job);
    const badge = document.querySelector("h1 .state");
    if (badge) badge.className = "state s-" + data.job.state;
    // Offer only the actions the job's new state allows.
    document.querySelectorAll("form[data-states]").forEach((form) => {
      form.hidden = !form.dataset.states.split(" ").includes(data.job.state);
    });
  }

  async function updateDead() {
    const data = await getJSON("/api/queues");
    fill(document.querySelector("main h1"), data.totals, "total");
  }

  const updaters = { overview: updateOverview, queue: updateQueue, job: updateJob, dead: updateDead };
  const update = updaters[page];
  if (!update) return;

  async function tick() {
    try {
      await update();
      live.className = "live on";
      live.title = "live: updated " + new Date().toLocaleTimeString();
    } catch (err) {
      live.className = "live off";
      live.title = "live updates failing: " + err.message;
    }
    window.setTimeout(tick, refresh);
  }
  tick();
})();
