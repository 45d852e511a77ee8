// ratekeeper's dashboard: polls /v1/stats about once a second and draws what it answers.
// Every value from the service is written with textContent (keys are user input), never as HTML.
"use strict";

(function () {
  const POLL_MS = 1000;
  const HIDDEN_POLL_MS = 5000;
  const CURRENT_SECONDS = 5; // the big figures: the average of the last 5 complete seconds
  const RULE_SECONDS = 10; // the per-rule rates: the last 10 complete seconds
  const SPARK_SECONDS = 60; // and their sparklines: the last minute
  const TOP_KEYS = 10;
  const SVG = "http://www.w3.org/2000/svg";
  // The four kinds of decision: the class the page draws them with, and their name in the JSON.
  const KINDS = [
    ["allowed", "allowed"],
    ["refused", "limited"],
    ["shadowed", "shadowed"],
    ["degraded", "degraded"],
  ];

  const view = { window: 60, stats: null, top: null, signedOut: false, tree: "", overrides: "" };

  // ---- small helpers ------------------------------------------------------------------------

  function byId(id) {
    return document.getElementById(id);
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svgElement(tag, attributes) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    return node;
  }

  function cell(row, text, className) {
    const td = element("td", className, text);
    row.appendChild(td);
    return td;
  }

  function emptyRow(tbody, columns, text) {
    const row = element("tr");
    const td = cell(row, text, "empty");
    td.colSpan = columns;
    tbody.replaceChildren(row);
  }

  // ---- numbers ------------------------------------------------------------------------------

  /** A count with thousands separators: 12,345. */
  function count(value) {
    if (value === null || value === undefined) return "–";
    const sign = value < 0 ? "-" : "";
    return sign + String(Math.round(Math.abs(value))).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  /** A rate per second as a plain number with one decimal: 123.4. */
  function rate(value) {
    return value.toFixed(1);
  }

  /** Seconds as milliseconds to two significant digits (0.31, 2.0, 12), whole past 100. */
  function milliseconds(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    const ms = seconds * 1000;
    if (ms === 0) return "0";
    if (ms >= 99.5) return String(Math.round(ms));
    return ms.toPrecision(2);
  }

  /** An axis label: 0, 250, 1.5k, 12k, 2M. */
  function compact(value) {
    const scales = [
      [1e9, "G"],
      [1e6, "M"],
      [1e3, "k"],
    ];
    for (const [scale, suffix] of scales) {
      if (Math.abs(value) >= scale) return String(Number((value / scale).toPrecision(3))) + suffix;
    }
    return String(Number(value.toPrecision(3)));
  }

  /** How long before ``now`` (epoch seconds) the ISO time ``at`` was: "12 s ago", "3 min ago". */
  function ago(at, now) {
    const seconds = Math.max(0, now - Date.parse(at) / 1000);
    if (seconds < 90) return Math.round(seconds) + " s ago";
    if (seconds < 90 * 60) return Math.round(seconds / 60) + " min ago";
    if (seconds < 36 * 3600) return Math.round(seconds / 3600) + " h ago";
    return Math.round(seconds / 86400) + " days ago";
  }

  /** Epoch seconds as "2026-11-27 14:00:03 UTC". */
  function utc(epoch) {
    return new Date(epoch * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function basename(path) {
    return String(path).split(/[\\/]/).pop();
  }

  // ---- series -------------------------------------------------------------------------------

  /** The complete seconds of a series: all its points but the last, still filling. */
  function complete(points) {
    return (points || []).slice(0, -1);
  }

  /** The average per second over the last ``seconds`` complete seconds. */
  function average(points, seconds) {
    const last = complete(points).slice(-seconds);
    if (last.length === 0) return 0;
    return last.reduce((sum, value) => sum + value, 0) / last.length;
  }

  function total(points, seconds) {
    return complete(points)
      .slice(-seconds)
      .reduce((sum, value) => sum + value, 0);
  }

  /** Round ``top`` up to a scale of about four steps of 1, 2, 2.5 or 5 times a power of ten. */
  function scale(top) {
    const raw = Math.max(top, 4) / 4;
    const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((f) => f * magnitude).find((s) => s >= raw);
    return { step, top: Math.ceil(Math.max(top, 4) / step) * step };
  }

  // ---- the masthead -------------------------------------------------------------------------

  function setState(id, text, tone, detail, title) {
    const dd = byId(id);
    const main = element("span", tone || "", text);
    const parts = [main];
    if (detail) parts.push(element("span", "detail", detail));
    dd.replaceChildren(...parts);
    dd.title = title || "";
  }

  function renderMasthead(stats) {
    byId("version").textContent = stats.version ? "v" + stats.version : "";
    const store = stats.store || {};
    const shards = (store.open_shards || []).map((s) =>
      typeof s === "string" ? s : JSON.stringify(s),
    );
    const storeDetail = ["breaker " + (store.breaker || "–")];
    if (shards.length) storeDetail.push("open shards: " + shards.join(", "));
    if (store.error) storeDetail.push(store.error);
    else if (store.last_error) {
      storeDetail.push(
        "last error " + ago(store.last_error.at, stats.now) + ": " + store.last_error.message,
      );
    }
    if (store.ok === null || store.ok === undefined) {
      setState("state-store", "unknown", "", "no worker has reported it yet");
    } else {
      const storeTone = !store.ok
        ? "bad"
        : store.breaker !== "closed" || shards.length
          ? "warn"
          : "good";
      setState("state-store", store.ok ? "ok" : "down", storeTone, storeDetail.join(" · "));
    }

    const config = stats.config;
    if (config === null || config === undefined)
      setState("state-config", "none", "", "overrides off");
    else
      setState("state-config", config.ok ? "ok" : "down", config.ok ? "good" : "bad", config.error);

    setState("state-workers", count(stats.workers), "");

    const degraded =
      typeof store.degraded === "number" ? store.degraded : total(stats.series.degraded, 60);
    setState(
      "state-degraded",
      count(degraded),
      degraded > 0 ? "warn" : "",
      "decisions by the failure policy",
    );

    const reload = stats.reload || {};
    const sources = reload.sources || [];
    const files = sources.length ? sources.map(basename).join(", ") : "no rule file";
    const when = reload.last_reload_at ? ago(reload.last_reload_at, stats.now) : "not since start";
    const details = [files];
    let tone = "";
    if (reload.last_error) {
      const errorAt = reload.last_error_at ? Date.parse(reload.last_error_at) : 0;
      const current = !reload.last_reload_at || errorAt >= Date.parse(reload.last_reload_at);
      const at = reload.last_error_at ? " " + ago(reload.last_error_at, stats.now) : "";
      details.push((current ? "failed" : "last failure") + at + ": " + reload.last_error);
      if (current) tone = "bad";
    }
    setState("state-reload", when, tone, details.join(" · "), sources.join("\n"));

    setState("state-time", utc(stats.now), "");
  }

  function setConnection(text, problem) {
    const node = byId("connection");
    node.textContent = text;
    node.className = "connection " + (problem ? "problem" : "live");
    document.body.classList.toggle("stale", problem);
  }

  // ---- decisions per second -----------------------------------------------------------------

  function renderFigures(series) {
    for (const [name, field] of KINDS) {
      byId("rate-" + name).textContent = rate(average(series[field], CURRENT_SECONDS));
    }
  }

  /**
   * The chart of ``stats.series``: the last five minutes, or, while the service is younger
   * than that, the time since it started (at least a minute).
   */
  function drawChart(stats) {
    const series = stats.series;
    const chart = byId("chart");
    const width = chart.clientWidth || 600;
    const height = chart.clientHeight || 240;
    const margin = { left: 46, right: 14, top: 10, bottom: 24 };
    const plotWidth = Math.max(10, width - margin.left - margin.right);
    const plotHeight = Math.max(10, height - margin.top - margin.bottom);
    const history = (series.allowed || []).length; // the current second included
    const age = stats.started ? Math.ceil(stats.now - stats.started) + 1 : history;
    const span = Math.min(history, Math.max(60, age)); // seconds shown
    const lines = KINDS.map(([name, field]) => [
      name,
      complete((series[field] || []).slice(-span)),
    ]);
    const tick = span <= 90 ? 15 : span <= 180 ? 30 : 60;
    const highest = Math.max(0, ...lines.flatMap(([, points]) => points));
    const { step, top } = scale(highest);
    const x = (secondsAgo) => margin.left + (1 - secondsAgo / span) * plotWidth;
    const y = (value) => margin.top + (1 - value / top) * plotHeight;

    chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const parts = [svgElement("title")];
    parts[0].textContent = "decisions per second over the last " + span + " seconds";

    for (let value = 0; value <= top + step / 2; value += step) {
      parts.push(
        svgElement("line", {
          class: "gridline",
          x1: margin.left,
          x2: margin.left + plotWidth,
          y1: y(value),
          y2: y(value),
        }),
      );
      const label = svgElement("text", {
        x: margin.left - 6,
        y: y(value) + 4,
        "text-anchor": "end",
      });
      label.textContent = compact(value);
      parts.push(label);
    }

    const suffix = plotWidth < 480 ? " s" : " s ago";
    for (let secondsAgo = 0; secondsAgo <= span; secondsAgo += tick) {
      const at = x(secondsAgo);
      parts.push(
        svgElement("line", {
          class: "axis",
          x1: at,
          x2: at,
          y1: margin.top + plotHeight,
          y2: margin.top + plotHeight + 4,
        }),
      );
      const anchor = secondsAgo === span ? "start" : secondsAgo === 0 ? "end" : "middle";
      const label = svgElement("text", { x: at, y: height - 6, "text-anchor": anchor });
      label.textContent =
        secondsAgo === 0 ? "now" : secondsAgo === span ? secondsAgo + suffix : secondsAgo + " s";
      parts.push(label);
    }
    parts.push(
      svgElement("line", {
        class: "axis",
        x1: margin.left,
        x2: margin.left + plotWidth,
        y1: margin.top + plotHeight,
        y2: margin.top + plotHeight,
      }),
    );

    for (const [name, points] of lines) {
      if (points.length === 0) continue;
      // The complete second i of n is n - i seconds ago: the last one ended one second ago.
      const coordinates = points.map(
        (value, i) => `${x(points.length - i).toFixed(1)},${y(value).toFixed(1)}`,
      );
      if (name === "allowed" || name === "refused") {
        const base = (margin.top + plotHeight).toFixed(1);
        const first = coordinates[0].split(",")[0];
        const last = coordinates[coordinates.length - 1].split(",")[0];
        const area = `${first},${base} ${coordinates.join(" ")} ${last},${base}`;
        parts.push(svgElement("polygon", { class: "area " + name, points: area }));
      }
      parts.push(
        svgElement("polyline", { class: "series " + name, points: coordinates.join(" ") }),
      );
    }
    chart.replaceChildren(...parts);
  }

  function sparkline(allowed, refused) {
    const width = 120;
    const height = 24;
    const highest = Math.max(1, ...allowed, ...refused);
    const spark = svgElement("svg", {
      class: "spark",
      viewBox: `0 0 ${width} ${height}`,
      preserveAspectRatio: "none",
    });
    for (const [name, points] of [
      ["allowed", allowed],
      ["refused", refused],
    ]) {
      if (points.length < 2) continue;
      const coordinates = points.map((value, i) => {
        const px = (i / (points.length - 1)) * width;
        const py = height - 1 - (value / highest) * (height - 2);
        return `${px.toFixed(1)},${py.toFixed(1)}`;
      });
      spark.appendChild(
        svgElement("polyline", {
          class: "series " + name,
          points: coordinates.join(" "),
          "vector-effect": "non-scaling-stroke",
        }),
      );
    }
    return spark;
  }

  function renderRules(rules) {
    const tbody = byId("per-rule").tBodies[0];
    if (!rules || rules.length === 0) {
      emptyRow(tbody, 8, "no decisions yet");
      return;
    }
    const rows = rules.map((rule) => {
      const row = element("tr");
      cell(row, rule.domain);
      cell(row, rule.rule, "rule");
      cell(row, rule.limit === null ? "–" : rule.limit, "wide");
      cell(row, rule.algorithm === null ? "–" : rule.algorithm, "wide");
      const allowed = average(rule.allowed, RULE_SECONDS);
      const refused = average(rule.limited, RULE_SECONDS);
      cell(row, rate(allowed), "num" + (allowed === 0 ? " zero" : ""));
      cell(row, rate(refused), "num" + (refused === 0 ? " zero" : ""));
      const shadowed = average(rule.shadowed, RULE_SECONDS);
      cell(row, rate(shadowed), "num wide" + (shadowed === 0 ? " zero" : ""));
      const lately = (points) => complete(points).slice(-SPARK_SECONDS);
      cell(row, "").appendChild(sparkline(lately(rule.allowed), lately(rule.limited)));
      return row;
    });
    tbody.replaceChildren(...rows);
  }

  // ---- the keys being limited ---------------------------------------------------------------

  function renderKeys(tableId, part, noun) {
    const tbody = byId(tableId).tBodies[0];
    const keys = (part && part.keys) || [];
    if (keys.length === 0) {
      emptyRow(tbody, 6, "no " + noun + " in this window");
    } else {
      tbody.replaceChildren(
        ...keys.map((key) => {
          const row = element("tr", key.allowed === false ? "refused-now" : "");
          cell(row, key.key, "key");
          cell(row, key.domain || "–", "wide");
          cell(row, key.rule === null ? "–" : key.rule);
          cell(row, key.limit === null ? "–" : key.limit, "wide");
          cell(
            row,
            key.remaining === null || key.remaining === undefined ? "–" : count(key.remaining),
            "num remaining",
          );
          const counted = cell(row, count(key.count), "count");
          if (key.at_most !== undefined) counted.title = "at most " + count(key.at_most);
          return row;
        }),
      );
    }
  }

  /** ``value`` and its noun: "1 refusal", "1,840 refusals". */
  function counted(value, noun) {
    return count(value) + " " + noun + (value === 1 ? "" : "s");
  }

  /** What a table's counts are, in words: over how long, of how many, and how far below the
   * truth a count can be (the summary's ``error``, never more than its ``bound``). */
  function boundText(top, part, noun) {
    if (!part) return "";
    const over = `Last ${count(top.span)} s: `;
    if (part.total === 0) return over + `no ${noun}s.`;
    const all = over + counted(part.total, noun) + " in all";
    if (part.error === 0) return all + ". Every count is exact.";
    return (
      all +
      `, from more keys than the ${count(top.capacity)} the dashboard keeps track of, so a ` +
      `count may be low: a key may have had up to ${counted(part.error, "more " + noun)} than ` +
      `it shows (the most this can ever be is 1 in ${count(top.capacity + 1)} of all ` +
      `${noun}s, ${count(part.bound)} here).`
    );
  }

  function renderTop(top) {
    if (!top || top.window !== view.window) return;
    view.top = top;
    renderKeys("top-refused", top.refused, "refusals");
    renderKeys("top-requests", top.requests, "decisions");
    byId("top-refused-bound").textContent = boundText(top, top.refused, "refusal");
    byId("top-requests-bound").textContent = boundText(top, top.requests, "decision");
  }

  // ---- latency, overrides, the rule tree ----------------------------------------------------

  function renderLatency(latency) {
    const tbody = byId("latency").tBodies[0];
    const surfaces = (latency && latency.surfaces) || [];
    byId("latency-window").textContent = latency ? "over the last " + latency.window + " s" : "";
    if (surfaces.length === 0) {
      emptyRow(tbody, 4, "no decisions yet");
      return;
    }
    tbody.replaceChildren(
      ...surfaces.map((surface) => {
        const row = element("tr");
        cell(row, surface.surface);
        cell(row, count(surface.count), "num");
        cell(row, milliseconds(surface.p50), "num");
        cell(row, milliseconds(surface.p99), "num");
        return row;
      }),
    );
  }

  function overrideLimit(override) {
    const window = override.time_window_sec;
    const period = typeof window === "number" ? count(window) + " s" : String(window);
    return count(override.capacity) + " / " + period;
  }

  function overrideAlgorithm(override) {
    const parts = [override.algorithm || "bucketed_window"];
    if (override.burst !== null && override.burst !== undefined)
      parts.push("burst " + count(override.burst));
    if (override.granularity !== null && override.granularity !== undefined) {
      parts.push("granularity " + override.granularity + " s");
    }
    return parts.join(", ");
  }

  function renderOverrides(overrides) {
    const signature = JSON.stringify(overrides);
    if (signature === view.overrides) return;
    view.overrides = signature;
    const tbody = byId("overrides").tBodies[0];
    const note = byId("overrides-note");
    if (!overrides) {
      emptyRow(tbody, 4, "no configuration store");
      note.textContent = "";
      return;
    }
    const items = overrides.items || [];
    if (items.length === 0) emptyRow(tbody, 4, overrides.error ? "unavailable" : "no overrides");
    else {
      tbody.replaceChildren(
        ...items.map((item) => {
          const row = element("tr");
          const override = item.override || {};
          cell(
            row,
            item.domain === "" ? "(default)" : item.domain,
            item.domain === "" ? "zero" : "",
          );
          cell(row, item.key, "key");
          cell(row, overrideLimit(override));
          cell(row, overrideAlgorithm(override), "wide");
          return row;
        }),
      );
    }
    const notes = [];
    if (overrides.truncated)
      notes.push("truncated: only the first " + count(items.length) + " are shown");
    if (overrides.error) notes.push("the configuration store failed: " + overrides.error);
    note.textContent = notes.join(" · ");
    note.className = "note" + (overrides.error ? " bad" : "");
  }

  function descriptorItem(descriptor) {
    const item = element("li");
    const entry =
      descriptor.value === null ? descriptor.key : descriptor.key + "=" + descriptor.value;
    item.appendChild(element("span", "entry", entry));
    if (descriptor.name) item.appendChild(element("span", "name", descriptor.name));
    if (descriptor.limit) item.appendChild(element("span", "limit", descriptor.limit));
    if (descriptor.algorithm) item.appendChild(element("span", "algorithm", descriptor.algorithm));
    if (descriptor.unlimited) item.appendChild(element("span", "flag unlimited", "unlimited"));
    if (descriptor.shadow_mode) item.appendChild(element("span", "flag shadow", "shadow"));
    if (descriptor.always_over)
      item.appendChild(element("span", "flag always-over", "always over"));
    if (descriptor.quota_mode) item.appendChild(element("span", "flag quota", "quota"));
    if (descriptor.children && descriptor.children.length) {
      item.appendChild(descriptorList(descriptor.children));
    }
    return item;
  }

  function descriptorList(descriptors) {
    const list = element("ul");
    for (const descriptor of descriptors) list.appendChild(descriptorItem(descriptor));
    return list;
  }

  function renderTree(tree) {
    const signature = JSON.stringify(tree);
    if (signature === view.tree) return;
    view.tree = signature;
    const root = byId("rules");
    if (!tree || tree.length === 0) {
      root.replaceChildren(element("p", "note", "no rules loaded"));
      return;
    }
    const list = element("ul");
    for (const domain of tree) {
      const item = element("li");
      item.appendChild(element("span", "domain", "domain " + domain.domain));
      item.appendChild(descriptorList(domain.descriptors || []));
      list.appendChild(item);
    }
    root.replaceChildren(list);
  }

  // ---- polling ------------------------------------------------------------------------------

  function render(stats) {
    view.stats = stats;
    renderMasthead(stats);
    renderFigures(stats.series);
    drawChart(stats);
    renderRules(stats.rules);
    if (view.window === 60) renderTop(stats.top);
    renderLatency(stats.latency);
    renderOverrides(stats.overrides);
    renderTree(stats.tree);
  }

  /** GET ``path`` as JSON; null once signed out or when it fails (the connection says why). */
  async function get(path) {
    let response;
    try {
      response = await fetch(path, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "application/json" },
      });
    } catch (error) {
      setConnection("the service does not answer", true);
      return null;
    }
    if (response.status === 401) {
      view.signedOut = true;
      setConnection("signed out, reload to sign in", true);
      return null;
    }
    if (!response.ok) {
      setConnection("the service answered " + response.status, true);
      return null;
    }
    try {
      return await response.json();
    } catch (error) {
      setConnection("the service answered something that is not JSON", true);
      return null;
    }
  }

  async function fetchTop() {
    const asked = view.window;
    const top = await get("/v1/top?window=" + asked + "&n=" + TOP_KEYS);
    if (top && asked === view.window) renderTop(top);
    return top !== null;
  }

  async function poll() {
    const started = Date.now();
    const stats = await get("/v1/stats");
    if (stats) {
      let ok = true;
      try {
        render(stats);
      } catch (error) {
        ok = false;
        setConnection("the page could not read the answer: " + error.message, true);
        console.error(error);
      }
      if (ok && view.window !== 60) ok = await fetchTop();
      if (ok) setConnection("live", false);
    }
    if (view.signedOut) return; // a new sign-in needs the page reloaded
    const period = document.hidden ? HIDDEN_POLL_MS : POLL_MS;
    setTimeout(poll, Math.max(200, period - (Date.now() - started)));
  }

  function chooseWindow(button) {
    const seconds = Number(button.dataset.window);
    if (seconds === view.window) return;
    view.window = seconds;
    for (const other of document.querySelectorAll(".segmented button")) {
      other.setAttribute("aria-pressed", String(other === button));
    }
    if (seconds === 60 && view.stats) renderTop(view.stats.top);
    else fetchTop();
  }

  function start() {
    for (const button of document.querySelectorAll(".segmented button")) {
      button.addEventListener("click", () => chooseWindow(button));
    }
    let pending = false;
    window.addEventListener("resize", () => {
      if (pending || !view.stats) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        drawChart(view.stats);
      });
    });
    poll();
  }

  start();
})();
