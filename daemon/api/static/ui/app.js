// adloader's operator window: jobs, the allocation timeline and the node, polled from the
// REST API with the session cookie that /ui/login sets (reads only). No framework; every
// string that comes from the daemon goes into the page as text, never as markup.
"use strict";

(() => {
  const POLL_MS = 1500;
  const HIDDEN_POLL_MS = 10000;
  const EVENTS_PAGE = 5000;
  const SVG = "http://www.w3.org/2000/svg";
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
                   "#edc948", "#9c755f", "#ff9da7", "#bab0ac"];
  const ENDED = new Set(["finished", "failed", "cancelled", "lost"]);
  const LIVE_STATES = "queued,buffered,running,paused";  // adloader.rest.JOB_STATES not ended
  const PAGE_MAX = 5000;  // adloader.rest.PAGE_MAX
  const RECENT_S = 86400;  // ended jobs shown: those submitted in the last day
  // events that say how many workers a job has from then on
  const SETS_WORKERS = new Set(["resize", "launched", "attached", "revived"]);
  const RELEASES = new Set(["finishing", "paused", "finished", "failed", "cancelled", "lost"]);

  const $ = (id) => document.getElementById(id);
  const state = {
    timer: null, running: false,
    jobs: [], alloc: null, health: null, healthAt: 0,
    lastEvent: 0, started: null,            // daemon start, server clock (s)
    series: new Map(),                      // job -> [[t, workers], ...] (changes only)
    current: new Map(),                     // job -> workers after the last event
    resizes: [],                            // {t, job, workers}
    predicted: new Map(),                   // job -> samples/s of the latest plan with it
    colours: new Map(),
    offsets: [],                            // server clock - local clock (ms), recent
    batchT: null,                           // the time of the decision being read
    failingSince: null,
  };

  class Unauthorized extends Error {}

  // -- the server's clock (from the Date header), so the timeline's "now" is the daemon's --
  function noteClock(response) {
    const date = Date.parse(response.headers.get("date") || "");
    if (!Number.isFinite(date)) return;
    state.offsets.push(date + 500 - Date.now());  // the header has whole seconds
    if (state.offsets.length > 8) state.offsets.shift();
  }
  function serverNow() {
    const o = state.offsets;
    const mean = o.length ? o.reduce((a, b) => a + b, 0) / o.length : 0;
    return (Date.now() + mean) / 1000;
  }

  async function get(path) {
    const response = await fetch(path, {credentials: "same-origin", cache: "no-store",
                                        headers: {Accept: "application/json"}});
    if (response.status === 401) throw new Unauthorized("not signed in");
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
      throw new Error(`${path}: ${response.status} ${detail}`);
    }
    noteClock(response);
    return response.json();
  }

  async function login(token) {
    const response = await fetch("/ui/login", {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify({token}),
    });
    return response.ok;
  }

  // -- events -> per-job step series --------------------------------------------------
  function setWorkers(job, t, workers) {
    if (job === null || job === undefined || !Number.isFinite(workers)) return;
    if (state.current.get(job) === workers) return;
    state.current.set(job, workers);
    let s = state.series.get(job);
    if (!s) state.series.set(job, s = []);
    if (s.length && s[s.length - 1][0] === t) s[s.length - 1][1] = workers;
    else s.push([t, workers]);
  }

  function apply(event) {
    // the events of one decision are written one after another (a launch, then the plan that
    // shrinks another job): read them as one instant, or the chart shows a spike between them
    const t = state.batchT !== null && Math.abs(event.t - state.batchT) < 0.05
      ? state.batchT : event.t;
    state.batchT = t;
    const {job, kind} = event;
    const data = event.data || {};
    if (kind === "plan") {
      for (const [id, w] of Object.entries(data.workers || {})) setWorkers(id, t, Number(w));
      for (const [id, p] of Object.entries(data.predicted || {})) state.predicted.set(id, p);
    } else if (SETS_WORKERS.has(kind)) {
      setWorkers(job, t, Number(data.workers));
      if (kind === "resize") state.resizes.push({t, job, workers: Number(data.workers)});
    } else if (RELEASES.has(kind)) {
      setWorkers(job, t, 0);
    }
  }

  function resetEvents() {
    state.lastEvent = 0;
    state.series.clear(); state.current.clear(); state.predicted.clear();
    state.resizes = [];
    state.batchT = null;
  }

  async function pullEvents() {
    for (;;) {
      const page = await get(`/v1/events?since=${state.lastEvent}&limit=${EVENTS_PAGE}`);
      for (const e of page) { apply(e); state.lastEvent = Math.max(state.lastEvent, e.id); }
      if (page.length < EVENTS_PAGE) return;
    }
  }

  async function pullHealth() {
    const response = await fetch("/healthz", {cache: "no-store"});
    if (!response.ok) throw new Error(`/healthz: ${response.status}`);
    noteClock(response);
    const health = await response.json();
    const started = serverNow() - health.uptime_s;
    if (state.started !== null && Math.abs(started - state.started) > 5) {
      resetEvents();  // the daemon restarted: read its story again
    }
    state.started = started;
    state.health = health;
  }

  // -- formatting -----------------------------------------------------------------------
  function colour(job) {
    if (!state.colours.has(job)) {
      state.colours.set(job, PALETTE[state.colours.size % PALETTE.length]);
    }
    return state.colours.get(job);
  }
  function rate(x) {
    if (x === null || x === undefined || !Number.isFinite(x)) return "—";
    return x >= 100 ? Math.round(x).toLocaleString("en-US") : x.toFixed(1);
  }
  function clock(t) {
    return new Date(t * 1000).toLocaleTimeString("en-GB", {hour12: false});
  }
  function span(s) {
    s = Math.max(0, Math.round(s));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    const h = Math.floor(s / 3600);
    return h < 48 ? `${h} h ${Math.floor((s % 3600) / 60)} min` : `${Math.floor(h / 24)} d`;
  }
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function swatch(job) {
    const s = el("span", {class: "swatch", "aria-hidden": "true"});
    s.style.background = colour(job);
    return s;
  }

  // -- the node -------------------------------------------------------------------------
  function renderNode() {
    const a = state.alloc, h = state.health;
    $("where").textContent = location.host;
    const facts = $("facts");
    facts.replaceChildren();
    const fact = (label, value) => facts.append(el("div", {class: "fact"},
      el("span", {class: "fact-label"}, label), el("span", {class: "fact-value"}, value)));
    fact("policy", a.policy);
    fact("capacity", `${a.capacity} loading workers`);
    fact("GPUs", String(a.gpus ?? (h ? h.gpus : "—")));
    fact("running jobs", String(Object.keys(a.jobs || {}).length));
    if (state.started !== null) fact("daemon up", span(serverNow() - state.started));
    if (h && h.status !== "ok") fact("health", h.status);

    const used = a.node_workers ?? Object.values(a.jobs || {}).reduce((x, y) => x + y, 0);
    $("capacity-label").textContent = `${used} of ${a.capacity} workers in use`;
    const bar = $("capacity-bar");
    bar.replaceChildren();
    const total = Math.max(a.capacity, used, 1);
    for (const [job, w] of Object.entries(a.jobs || {})) {
      if (!w) continue;
      const part = el("span", {class: "capacity-part", title: `${job}: ${w} workers`});
      part.style.width = `${(100 * w) / total}%`;
      part.style.background = colour(job);
      part.textContent = w >= 1 ? String(w) : "";
      bar.append(part);
    }
  }

  // -- the jobs -------------------------------------------------------------------------
  function renderJobs() {
    const showEnded = $("show-ended").checked;
    const active = state.jobs.filter((j) => !ENDED.has(j.state));
    const ended = state.jobs.filter((j) => ENDED.has(j.state))
      .sort((x, y) => (y.finished_at || 0) - (x.finished_at || 0));
    const rows = showEnded ? active.concat(ended) : active;
    const body = $("jobs-body");
    body.replaceChildren();
    for (const j of rows) {
      const predicted = state.predicted.get(j.id);
      const measured = j.throughput;
      const running = j.state === "running";
      const ratioCell = el("td", {class: "ratio"});
      if (running && j.iteration > 0 && Number.isFinite(measured) && predicted > 0) {
        const r = measured / predicted;
        const bar = el("span", {class: "ratio-bar"});
        const fill = el("span", {class: "ratio-fill"});
        fill.style.width = `${Math.min(100, 100 * r)}%`;
        fill.style.background = colour(j.id);
        bar.append(fill);
        ratioCell.append(bar, el("span", {class: "ratio-text"}, `${Math.round(100 * r)}%`));
      } else {
        ratioCell.append("—");
      }
      const total = j.spec && j.spec.iterations;
      const iter = j.iteration === null || j.iteration === undefined ? "—" : String(j.iteration);
      const iterCell = el("td", {class: "iteration"});
      iterCell.append(total ? `${iter} / ${total}` : iter);
      if (total && Number.isFinite(j.iteration)) {
        const p = el("span", {class: "progress"});
        const f = el("span", {class: "progress-fill"});
        f.style.width = `${Math.min(100, (100 * j.iteration) / total)}%`;
        p.append(f);
        iterCell.append(p);
      }
      const stateCell = el("td", {}, el("span", {class: `state state-${j.state}`}, j.state));
      if (j.reason && ENDED.has(j.state)) stateCell.title = j.reason;
      body.append(el("tr", {"data-job": j.id, class: ENDED.has(j.state) ? "ended" : ""},
        el("td", {class: "id"}, swatch(j.id), j.id),
        el("td", {class: "name"}, j.name),
        stateCell,
        el("td", {class: "num"}, j.workers === null || j.workers === undefined ? "—" :
                                   String(j.workers)),
        el("td", {class: "num"}, running ? rate(measured) : "—"),
        el("td", {class: "num"}, predicted === undefined ? "—" : rate(predicted)),
        ratioCell,
        iterCell));
    }
    $("no-jobs").hidden = state.jobs.length > 0;
  }

  // -- the timeline ---------------------------------------------------------------------
  function niceStep(span, target) {
    const raw = span / Math.max(1, target);
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200,
                   86400];
    return steps.find((s) => s >= raw) || 86400 * Math.ceil(raw / 86400);
  }

  // a step series' value at each of the (sorted) times
  function valuesAt(s, times) {
    const out = [];
    let i = 0, v = 0;
    for (const t of times) {
      while (i < s.length && s[i][0] <= t) v = s[i++][1];
      out.push(v);
    }
    return out;
  }

  // a step path from x[0] to x[n] at level ys[i] over [x[i], x[i+1]], drawn left to right
  // from (x[0], ys[0]); and the same drawn right to left from (x[n], ys[n-1])
  function stepsRight(xs, ys) {
    let d = "";
    for (let i = 0; i < ys.length; i++) d += `${i ? `V${ys[i]}` : ""}H${xs[i + 1]}`;
    return d;
  }
  function stepsLeft(xs, ys) {
    let d = "";
    for (let i = ys.length - 1; i >= 0; i--) {
      d += `${i < ys.length - 1 ? `V${ys[i]}` : ""}H${xs[i]}`;
    }
    return d;
  }

  function renderTimeline() {
    const box = $("timeline-box");
    const chart = $("timeline");
    const width = Math.max(320, box.clientWidth);
    const height = 300;
    const m = {left: 46, right: 18, top: 14, bottom: 34};
    const w = width - m.left - m.right, h = height - m.top - m.bottom;
    chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
    chart.setAttribute("width", width);
    chart.setAttribute("height", height);
    chart.replaceChildren();

    const now = Math.max(serverNow(), state.started || 0);
    const range = Number($("range").value);
    let t0 = state.started ?? now - 60;
    if (range > 0) t0 = Math.max(t0, now - range);
    const t1 = Math.max(now, t0 + 10);
    const x = (t) => m.left + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) * w;
    const stacked = $("mode").value === "stacked";
    const capacity = state.alloc ? state.alloc.capacity : 0;

    // the jobs with workers in the window, in colour order
    const order = [...state.colours.keys()].concat(
      [...state.series.keys()].filter((j) => !state.colours.has(j)));
    const shown = order.filter((j) => {
      const s = state.series.get(j);
      return s && s.some(([ts, v], i) => v > 0 && (i + 1 >= s.length || s[i + 1][0] > t0)
                                        && ts <= t1);
    });

    // change times in the window, and each job's (stacked) level on each interval
    const times = new Set([t0]);
    for (const j of shown) {
      for (const [ts] of state.series.get(j)) if (ts > t0 && ts < t1) times.add(ts);
    }
    const ticks = [...times].sort((a, b) => a - b);
    const levels = shown.map((j) => valuesAt(state.series.get(j), ticks));
    const tops = [];
    let peak = capacity;
    if (stacked) {
      const run = ticks.map(() => 0);
      for (const lv of levels) {
        tops.push(lv.map((v, i) => (run[i] += v)));
      }
      for (const v of run) peak = Math.max(peak, v);
    } else {
      for (const lv of levels) for (const v of lv) peak = Math.max(peak, v);
    }
    peak = Math.max(peak, 1);
    const yStep = Math.max(1, Math.ceil(peak / 6));
    const yMax = Math.ceil(peak / yStep) * yStep;
    const y = (v) => m.top + h - (v / yMax) * h;

    // grid and axes
    const grid = svg("g", {class: "grid"});
    for (let v = 0; v <= yMax; v += yStep) {
      grid.append(svg("line", {x1: m.left, x2: m.left + w, y1: y(v), y2: y(v)}));
      grid.append(svg("text", {x: m.left - 8, y: y(v) + 4, "text-anchor": "end",
                               class: "tick"}, String(v)));
    }
    const step = niceStep(t1 - t0, Math.max(2, Math.floor(w / 110)));
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      grid.append(svg("line", {x1: x(t), x2: x(t), y1: m.top, y2: m.top + h, class: "v"}));
      grid.append(svg("text", {x: x(t), y: m.top + h + 18, "text-anchor": "middle",
                               class: "tick"}, clock(t)));
    }
    chart.append(grid);
    chart.append(svg("text", {x: 12, y: m.top + h / 2, class: "axis-label",
                              transform: `rotate(-90 12 ${m.top + h / 2})`,
                              "text-anchor": "middle"}, "workers"));

    // one path per job: a band (stacked) or a step line
    const bands = svg("g", {class: stacked ? "bands" : "lines"});
    shown.forEach((job, k) => {
      const xs = ticks.map((t) => x(t)).concat([x(t1)]);
      const first = state.series.get(job)[0][0];  // nothing before the job's first change
      const from = Math.max(0, ticks.findIndex((t) => t >= first));
      const xj = xs.slice(from);
      let d;
      if (stacked) {  // a band (filled, no outline) between the jobs below and this one's top
        const top = tops[k].slice(from).map(y);
        const bottom = (k ? tops[k - 1] : ticks.map(() => 0)).slice(from).map(y);
        d = `M${xj[0]},${top[0]}${stepsRight(xj, top)}V${bottom[bottom.length - 1]}`
          + `${stepsLeft(xj, bottom)}Z`;
      } else {
        const off = (k - (shown.length - 1) / 2) * 2;  // lines on the same level stay apart
        const line = levels[k].slice(from).map((v) => y(v) + off);
        d = `M${xj[0]},${line[0]}${stepsRight(xj, line)}`;
      }
      const path = svg("path", stacked
        ? {d, class: "series", "data-job": job, fill: colour(job), stroke: "none"}
        : {d, class: "series", "data-job": job, fill: "none", stroke: colour(job)});
      path.append(svg("title", {}, `${job}: ${state.current.get(job) ?? 0} workers now`));
      bands.append(path);
    });
    chart.append(bands);

    if (capacity > 0) {
      chart.append(svg("line", {x1: m.left, x2: m.left + w, y1: y(capacity), y2: y(capacity),
                                class: "capacity-line"}));
      chart.append(svg("text", {x: m.left + w - 4, y: y(capacity) - 5, "text-anchor": "end",
                                class: "capacity-text"}, `capacity ${capacity}`));
    }

    // resize events: a mark where the job's workers changed, and a tick under the axis
    const marks = svg("g", {class: "resizes"});
    for (const r of state.resizes) {
      if (r.t < t0 || r.t > t1) continue;
      const k = shown.indexOf(r.job);
      if (k < 0) continue;
      const i = ticks.findIndex((t) => t >= r.t);
      const at = i < 0 ? ticks.length - 1 : i;
      const level = stacked ? tops[k][at] : levels[k][at];
      const cx = x(r.t), cy = stacked ? y(level) : y(level) + (k - (shown.length - 1) / 2) * 2;
      const mark = svg("g", {class: "resize", "data-job": r.job});
      mark.append(svg("line", {x1: cx, x2: cx, y1: m.top + h, y2: m.top + h + 6,
                               stroke: colour(r.job)}));
      mark.append(svg("path", {d: `M${cx - 5},${cy - 9}L${cx + 5},${cy - 9}L${cx},${cy - 1}Z`,
                               fill: colour(r.job)}));
      mark.append(svg("title", {}, `${clock(r.t)} resize ${r.job} → ${r.workers} workers`));
      marks.append(mark);
    }
    chart.append(marks);
    chart.append(svg("line", {x1: m.left, x2: m.left + w, y1: m.top + h, y2: m.top + h,
                              class: "axis"}));
    chart.append(svg("line", {x1: m.left, x2: m.left, y1: m.top, y2: m.top + h,
                              class: "axis"}));
    if (!shown.length) {
      chart.append(svg("text", {x: m.left + w / 2, y: m.top + h / 2, "text-anchor": "middle",
                                class: "nothing"}, "no job has workers in this range"));
    }

    // legend: colour, job, name, workers now
    const names = new Map(state.jobs.map((j) => [j.id, j.name]));
    const legend = $("legend");
    legend.replaceChildren();
    for (const job of shown) {
      legend.append(el("li", {"data-job": job}, swatch(job),
        el("span", {class: "legend-id"}, job),
        el("span", {class: "legend-name"}, names.get(job) || ""),
        el("span", {class: "legend-workers"}, `${state.current.get(job) ?? 0} now`)));
    }
    if (state.resizes.some((r) => r.t >= t0 && r.t <= t1 && shown.includes(r.job))) {
      const key = el("li", {class: "legend-key"});
      key.append(el("span", {class: "resize-key", "aria-hidden": "true"}, "▼"), "resize");
      legend.append(key);
    }
  }

  function render() {
    for (const j of state.jobs) colour(j.id);  // colours in submit order
    renderNode();
    renderJobs();
    renderTimeline();
  }

  // -- polling and signing in -----------------------------------------------------------
  function setStatus(text, bad) {
    const s = $("status");
    s.textContent = text;
    s.classList.toggle("bad", Boolean(bad));
  }

  async function poll() {
    state.timer = null;
    if (!state.running) return;
    try {
      if (state.started === null || Date.now() - state.healthAt > 10000) {
        await pullHealth();
        state.healthAt = Date.now();
      }
      // the jobs in play, whenever submitted, and those submitted in the last day (the
      // listing pages 500 at a time, oldest first: a plain GET would show a long-lived
      // node's oldest history and miss its running jobs)
      const since = Math.floor(serverNow() - RECENT_S);
      const [live, recent, alloc] = await Promise.all([
        get(`/v1/jobs?state=${LIVE_STATES}&limit=${PAGE_MAX}`),
        get(`/v1/jobs?since=${since}&limit=${PAGE_MAX}`), get("/v1/allocations")]);
      const jobs = [...new Map([...recent, ...live].map((j) => [j.id, j])).values()]
        .sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
      await pullEvents();
      if (!state.running) return;
      state.jobs = jobs;
      state.alloc = alloc;
      state.failingSince = null;
      render();
      setStatus(`live · ${clock(serverNow())}`);
    } catch (e) {
      if (e instanceof Unauthorized) {
        signedOut("Signed out: sign in again (the token may have changed).");
        return;
      }
      if (state.failingSince === null) state.failingSince = serverNow();
      setStatus(`cannot reach the daemon since ${clock(state.failingSince)}: ${e.message}`, true);
    }
    if (state.running) state.timer = setTimeout(poll, document.hidden ? HIDDEN_POLL_MS : POLL_MS);
  }

  function showDashboard() {
    $("login").hidden = true;
    $("dashboard").hidden = false;
    $("logout").hidden = false;
    state.running = true;
    if (!state.timer) poll();
  }

  function signedOut(message) {
    state.running = false;
    if (state.timer) clearTimeout(state.timer);
    state.timer = null;
    // forget everything read with the old session
    state.jobs = []; state.alloc = null; state.health = null; state.started = null;
    resetEvents(); state.colours.clear();
    for (const id of ["jobs-body", "timeline", "legend", "facts", "capacity-bar"]) {
      $(id).replaceChildren();
    }
    $("capacity-label").textContent = "";
    $("dashboard").hidden = true;
    $("logout").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    setStatus("not signed in");
    $("token").focus();
  }

  async function start() {
    $("where").textContent = location.host;
    const m = /^#token=(.+)$/.exec(location.hash);
    if (m) {
      // the fragment never reached the server; it leaves the address bar before anything else
      history.replaceState(null, "", location.pathname + location.search);
      let token = "";
      try { token = decodeURIComponent(m[1]); } catch (e) { token = m[1]; }
      if (!(await login(token.trim()))) {
        signedOut("The token in the link is wrong.");
        return;
      }
    }
    try {
      await get("/v1/allocations");
      showDashboard();
    } catch (e) {
      if (e instanceof Unauthorized) signedOut("");
      else {
        setStatus(`cannot reach the daemon: ${e.message}`, true);
        setTimeout(start, 5000);
      }
    }
  }

  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("token");
    const ok = await login(input.value.trim()).catch(() => false);
    input.value = "";
    if (ok) {
      $("login-error").textContent = "";
      showDashboard();
    } else {
      $("login-error").textContent = "Wrong token.";
    }
  });
  $("logout").addEventListener("click", async () => {
    await fetch("/ui/logout", {method: "POST", credentials: "same-origin"}).catch(() => null);
    signedOut("Signed out.");
  });
  // the view and the range may come from the address (?view=lines&range=120) and stay there
  const query = new URLSearchParams(location.search);
  for (const [param, id] of [["view", "mode"], ["range", "range"]]) {
    const wanted = query.get(param);
    if (wanted !== null && [...$(id).options].some((o) => o.value === wanted)) {
      $(id).value = wanted;
    }
    $(id).addEventListener("change", () => {
      const q = new URLSearchParams(location.search);
      q.set(param, $(id).value);
      history.replaceState(null, "", `${location.pathname}?${q}`);
    });
  }
  for (const id of ["mode", "range", "show-ended"]) {
    $(id).addEventListener("change", () => { if (state.alloc) render(); });
  }
  window.addEventListener("resize", () => { if (state.alloc) renderTimeline(); });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && state.running) {
      if (state.timer) clearTimeout(state.timer);
      poll();
    }
  });
  start();
})();
