// Weir's dashboard: a page per route (#/ jobs, #/jobs/<id>, #/taskmanagers), redrawn from
// the REST API every second while it is shown. No framework and no build step: the file is
// embedded in the binary as it is.
"use strict";

const REFRESH_MS = 1000;
const view = document.getElementById("view");
const statusLine = document.getElementById("status");
let timer = null;

// The bearer token, when the endpoint requires one: `#token=...` once, then kept for the tab.
(function keepToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) { sessionStorage.setItem("weir-token", decodeURIComponent(m[1])); location.hash = "#/"; }
})();

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem("weir-token");
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(path, { headers });
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try { message = (await response.json()).errors.join("; "); } catch (_) {}
    throw new Error(message);
  }
  return response.json();
}

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const fmtNum = (n) => n >= 1e9 ? (n / 1e9).toFixed(2) + " G" : n >= 1e6 ? (n / 1e6).toFixed(2) + " M" : n >= 1e4 ? (n / 1e3).toFixed(1) + " k" : (Math.round(n * 10) / 10).toString();
const fmtBytes = (n) => n >= 1 << 30 ? (n / (1 << 30)).toFixed(2) + " GiB" : n >= 1 << 20 ? (n / (1 << 20)).toFixed(2) + " MiB" : n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B";
const fmtMs = (ms) => ms == null ? "–" : ms >= 3600000 ? (ms / 3600000).toFixed(1) + " h" : ms >= 60000 ? (ms / 60000).toFixed(1) + " min" : ms >= 1000 ? (ms / 1000).toFixed(1) + " s" : ms + " ms";
const fmtTime = (t) => t > 0 ? new Date(t).toLocaleTimeString() : "–";
const fmtWatermark = (w) => w == null ? "no watermark" : w <= -9223372036854775000 ? "−∞" : w >= 9223372036854775000 ? "+∞ (input ended)" : new Date(w).toISOString().replace("T", " ").replace("Z", "");

function stateBadge(state) { return `<span class="state ${esc(state)}" data-testid="job-state">${esc(state)}</span>`; }

function route() {
  clearTimeout(timer);
  const hash = location.hash || "#/";
  let render;
  const job = hash.match(/^#\/jobs\/([0-9a-f]+)/);
  if (job) render = () => renderJob(job[1]);
  else if (hash.startsWith("#/taskmanagers")) render = renderTaskManagers;
  else render = renderJobs;
  const tick = async () => {
    try {
      await render();
      statusLine.textContent = "updated " + new Date().toLocaleTimeString();
      statusLine.dataset.updated = String(Date.now());
      // How many times the page was redrawn from the API (the browser test reads it).
      statusLine.dataset.refreshes = String(Number(statusLine.dataset.refreshes || 0) + 1);
    } catch (e) {
      statusLine.textContent = "cannot reach the JobManager: " + e.message;
    }
    timer = setTimeout(tick, REFRESH_MS);
  };
  tick();
}

async function renderJobs() {
  const [overview, jobs] = await Promise.all([api("/overview"), api("/jobs/overview")]);
  const rows = jobs.jobs.map((j) => `
    <tr class="link" data-testid="job-row" data-job-id="${esc(j.jid)}" onclick="location.hash='#/jobs/${esc(j.jid)}'">
      <td><a href="#/jobs/${esc(j.jid)}" data-testid="job-name">${esc(j.name)}</a></td>
      <td>${stateBadge(j.state)}</td>
      <td>${fmtTime(j["start-time"])}</td>
      <td>${fmtMs(j.duration)}</td>
      <td data-testid="job-tasks">${j.tasks.running} running / ${j.tasks.total}</td>
    </tr>`).join("");
  view.innerHTML = `
    <div class="card">
      <h1>Jobs</h1>
      <div class="kpis">
        <div class="kpi"><b data-testid="jobs-running">${overview["jobs-running"]}</b><span>running</span></div>
        <div class="kpi"><b>${overview["jobs-finished"]}</b><span>finished</span></div>
        <div class="kpi"><b>${overview["jobs-cancelled"]}</b><span>cancelled</span></div>
        <div class="kpi"><b>${overview["jobs-failed"]}</b><span>failed</span></div>
        <div class="kpi"><b data-testid="taskmanager-count">${overview.taskmanagers}</b><span>TaskManagers</span></div>
        <div class="kpi"><b>${overview["slots-total"]}</b><span>slots</span></div>
      </div>
    </div>
    <div class="card">
      <table data-testid="job-list"><thead><tr><th>Name</th><th>State</th><th>Started</th><th>Duration</th><th>Tasks</th></tr></thead>
      <tbody>${rows || `<tr><td colspan="5" class="empty">No jobs.</td></tr>`}</tbody></table>
    </div>`;
}

// Columns by longest path from the sources, rows in order within a column.
function layout(vertices, edges) {
  const level = new Map(vertices.map((v) => [v.id, 0]));
  for (let changed = true, guard = 0; changed && guard < vertices.length + 1; guard++) {
    changed = false;
    for (const e of edges) {
      const want = level.get(e.source) + 1;
      if (want > level.get(e.target)) { level.set(e.target, want); changed = true; }
    }
  }
  const columns = new Map();
  const position = new Map();
  for (const v of vertices) {
    const l = level.get(v.id);
    const row = columns.get(l) || 0;
    columns.set(l, row + 1);
    position.set(v.id, { x: 20 + l * 270, y: 20 + row * 110 });
  }
  const height = 40 + Math.max(...[...columns.values()], 1) * 110;
  const width = 40 + (Math.max(...[...columns.keys()], 0) + 1) * 270;
  return { position, width, height };
}

function graphSvg(job, plan) {
  const edges = plan.plan.job_graph.edges.map((e) => ({ source: String(e.source), target: String(e.target), partitioner: e.partitioner }));
  const { position, width, height } = layout(job.vertices, edges);
  const boxW = 220, boxH = 84;
  const lines = edges.map((e) => {
    const a = position.get(e.source), b = position.get(e.target);
    if (!a || !b) return "";
    const x1 = a.x + boxW, y1 = a.y + boxH / 2, x2 = b.x - 4, y2 = b.y + boxH / 2;
    const mx = (x1 + x2) / 2;
    return `<path class="edge" d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}"/>
      <text x="${mx}" y="${(y1 + y2) / 2 - 6}" text-anchor="middle" class="muted">${esc(String(e.partitioner).toUpperCase())}</text>`;
  }).join("");
  const boxes = job.vertices.map((v) => {
    const p = position.get(v.id);
    const m = v.metrics;
    const name = v.name.length > 30 ? v.name.slice(0, 29) + "…" : v.name;
    return `<g class="vertex ${esc(v["backpressure-level"])}" data-testid="vertex" data-vertex-id="${esc(v.id)}"
        data-parallelism="${v.parallelism}" data-backpressure="${esc(v["backpressure-level"])}"
        data-records-in="${m["read-records"]}" data-records-out="${m["write-records"]}"
        transform="translate(${p.x},${p.y})">
      <title>${esc(v.name)}</title>
      <rect width="${boxW}" height="${boxH}"></rect>
      <text x="10" y="20" font-weight="600">${esc(name)}</text>
      <text x="10" y="38">Parallelism: <tspan data-testid="vertex-parallelism">${v.parallelism}</tspan> · ${esc(v.status)}</text>
      <text x="10" y="56">In ${fmtNum(m["read-records-per-second"])}/s · Out ${fmtNum(m["write-records-per-second"])}/s</text>
      <text x="10" y="74">Backpressure <tspan font-weight="600">${esc(v["backpressure-level"])}</tspan> · busy ${Math.round(m["accumulated-busy-time"] / 10)}%</text>
    </g>`;
  }).join("");
  return `<svg data-testid="job-graph" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#7b8796"/></marker></defs>
    ${lines}${boxes}</svg>
    <div class="legend"><span><i class="swatch" style="background:#e6f5ec"></i>OK</span><span><i class="swatch" style="background:#fff3cf"></i>LOW backpressure</span><span><i class="swatch" style="background:#fbdcd8"></i>HIGH backpressure</span></div>`;
}

// A line chart of `series` ({name, points: [[t, v]]}) over time.
function lineChart(series, testid, unit) {
  const w = 640, h = 200, pad = 40;
  const all = series.flatMap((s) => s.points);
  if (all.length < 2) return `<p class="empty" data-testid="${testid}">Not enough samples yet.</p>`;
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]));
  const vmax = Math.max(1, ...all.map((p) => p[1]));
  const x = (t) => pad + (t - t0) / Math.max(1, t1 - t0) * (w - pad - 10);
  const y = (v) => h - 24 - v / vmax * (h - 40);
  const colors = ["#2b6cb0", "#d1382b", "#2e9d5b", "#8a4fbf", "#e08a00", "#3a8fa3"];
  const paths = series.map((s, i) => `<path d="${s.points.map((p, j) => (j ? "L" : "M") + x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ")}" stroke="${colors[i % colors.length]}" stroke-width="1.8" fill="none"/>`).join("");
  const legend = series.map((s, i) => `<span><i class="swatch" style="background:${colors[i % colors.length]}"></i>${esc(s.name)}</span>`).join("");
  return `<svg data-testid="${testid}" width="100%" viewBox="0 0 ${w} ${h}">
    <line x1="${pad}" y1="${h - 24}" x2="${w - 10}" y2="${h - 24}" stroke="#ccc"/>
    <text x="4" y="16" class="muted">${fmtNum(vmax)} ${esc(unit)}</text>
    <text x="${pad}" y="${h - 6}" class="muted">${fmtTime(t0)}</text><text x="${w - 10}" y="${h - 6}" text-anchor="end" class="muted">${fmtTime(t1)}</text>
    ${paths}</svg><div class="legend">${legend}</div>`;
}

function checkpointChart(history) {
  const done = history.filter((c) => c.status === "COMPLETED").slice().reverse();
  if (done.length === 0) return `<p class="empty" data-testid="checkpoint-chart">No completed checkpoint yet.</p>`;
  const w = 640, h = 180, pad = 40, bw = Math.max(4, Math.min(28, (w - pad) / done.length - 4));
  const dmax = Math.max(1, ...done.map((c) => c.end_to_end_duration || 0));
  const smax = Math.max(1, ...done.map((c) => c.state_size));
  const bars = done.map((c, i) => {
    const x = pad + i * (bw + 4), dh = (c.end_to_end_duration || 0) / dmax * (h - 40), sh = c.state_size / smax * (h - 40);
    return `<rect x="${x}" y="${h - 20 - dh}" width="${bw / 2}" height="${dh}" fill="#2b6cb0"><title>#${c.id}: ${fmtMs(c.end_to_end_duration)}</title></rect>
      <rect x="${x + bw / 2}" y="${h - 20 - sh}" width="${bw / 2}" height="${sh}" fill="#8fb3dd"><title>#${c.id}: ${fmtBytes(c.state_size)}</title></rect>`;
  }).join("");
  return `<svg data-testid="checkpoint-chart" width="100%" viewBox="0 0 ${w} ${h}">
    <text x="4" y="14" class="muted">max ${fmtMs(dmax)} · ${fmtBytes(smax)}</text>${bars}</svg>
    <div class="legend"><span><i class="swatch" style="background:#2b6cb0"></i>duration</span><span><i class="swatch" style="background:#8fb3dd"></i>state size</span></div>`;
}

async function renderJob(id) {
  const [job, plan, checkpoints, exceptions, throughput] = await Promise.all([
    api(`/jobs/${id}`), api(`/jobs/${id}/plan`), api(`/jobs/${id}/checkpoints`),
    api(`/jobs/${id}/exceptions`), api(`/jobs/${id}/throughput`)]);
  const names = new Map(job.vertices.map((v) => [v.id, v.name]));
  const series = job.vertices.map((v) => ({
    name: v.name,
    points: throughput.points.map((p) => { const r = p.vertices.find((x) => x.id === v.id); return [p.timestamp, r ? r["read-records-per-second"] || r["write-records-per-second"] : 0]; }),
  }));
  const c = checkpoints.counts;
  const rows = checkpoints.history.map((k) => `<tr data-testid="checkpoint-row" data-checkpoint-id="${k.id}" data-status="${esc(k.status)}">
      <td>${k.id}${k.is_savepoint ? " (savepoint)" : ""}</td><td>${esc(k.status)}</td><td>${fmtTime(k.trigger_timestamp)}</td>
      <td>${fmtMs(k.end_to_end_duration)}</td><td>${fmtBytes(k.state_size)}</td><td>${fmtMs(k.alignment_duration)}</td>
      <td>${k.num_acknowledged_subtasks}</td><td class="muted">${esc(k.failure_message || k.external_path || "")}</td></tr>`).join("");
  const watermarks = job.vertices.map((v) => `<tr data-testid="watermark-row" data-vertex-id="${esc(v.id)}"><td>${esc(v.name)}</td>
      <td>${fmtWatermark(v.metrics["current-input-watermark"])}</td>
      <td data-testid="watermark-lag">${v.metrics["watermark-lag"] != null ? fmtMs(v.metrics["watermark-lag"]) : "–"}</td></tr>`).join("");
  const failures = exceptions.exceptionHistory.entries.map((e) => `<div class="exception" data-testid="exception">${fmtTime(e.timestamp)} ${e.restarted ? "(restarted)" : "(job failed)"}\n${esc(e.exceptionName)}</div>`).join("");
  view.innerHTML = `
    <div class="card" data-testid="job" data-job-id="${esc(job.jid)}">
      <h1 data-testid="job-title">${esc(job.name)} ${stateBadge(job.state)}</h1>
      <div class="muted">${esc(job.jid)}</div>
      <div class="kpis">
        <div class="kpi"><b>${fmtMs(job.duration)}</b><span>uptime</span></div>
        <div class="kpi"><b data-testid="restarts">${job["num-restarts"]}</b><span>restarts</span></div>
        <div class="kpi"><b data-testid="checkpoints-completed">${c.completed}</b><span>checkpoints completed</span></div>
        <div class="kpi"><b>${c.failed}</b><span>failed</span></div>
        <div class="kpi"><b>${c.in_progress}</b><span>in progress</span></div>
      </div>
    </div>
    <div class="card"><h2>Job graph</h2><div style="overflow-x:auto">${graphSvg(job, plan)}</div></div>
    <div class="grid">
      <div class="card"><h2>Throughput (records per second)</h2>${lineChart(series, "throughput-chart", "rec/s")}</div>
      <div class="card"><h2>Checkpoints</h2>${checkpointChart(checkpoints.history)}</div>
    </div>
    <div class="card"><h2>Checkpoint history</h2>
      <table data-testid="checkpoint-table"><thead><tr><th>ID</th><th>Status</th><th>Triggered</th><th>Duration</th><th>State size</th><th>Alignment</th><th>Acks</th><th>Path / failure</th></tr></thead>
      <tbody>${rows || `<tr><td colspan="8" class="empty">No checkpoint yet.</td></tr>`}</tbody></table></div>
    <div class="grid">
      <div class="card"><h2>Watermarks</h2><table data-testid="watermarks"><thead><tr><th>Vertex</th><th>Input watermark</th><th>Lag</th></tr></thead><tbody>${watermarks}</tbody></table></div>
      <div class="card"><h2>Exceptions and restarts</h2><div data-testid="exceptions">${failures || `<p class="empty">No failure.</p>`}</div></div>
    </div>`;
  void names;
}

async function renderTaskManagers() {
  const tms = await api("/taskmanagers");
  const rows = tms.taskmanagers.map((t) => `<tr data-testid="taskmanager-row"><td>${esc(t.id)}</td><td>${esc(t.dataAddress)}</td><td>${t.slotsNumber}</td><td>${fmtMs(t.timeSinceLastHeartbeat)}</td></tr>`).join("");
  view.innerHTML = `<div class="card"><h1>TaskManagers</h1>
    <table data-testid="taskmanagers"><thead><tr><th>ID</th><th>Data address</th><th>Slots</th><th>Last heartbeat</th></tr></thead>
    <tbody>${rows || `<tr><td colspan="4" class="empty">No TaskManager registered.</td></tr>`}</tbody></table></div>`;
}

window.addEventListener("hashchange", route);
route();
