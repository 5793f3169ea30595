// The inspection page: plain DOM, no framework, no build. Memory contents are untrusted:
// every value goes into the page as a text node (`textContent`), never as HTML.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const MAX_EVENTS = 200;
  const PAGE = 20;

  const view = {
    workflow: "",
    scope: "both",
    workspace: "",
    type: "",
    tag: "",
    superseded: false,
    // Search and list read as of this instant (ISO 8601, UTC); "": now, current memories.
    asOf: "",
    offset: 0,
    selected: null,
  };
  const knownWorkflows = new Set();

  // ---------------------------------------------------------------- helpers

  // el("li", {className, dataset, title, onClick, ...attributes}, ...children): strings
  // become text nodes; null, undefined and false are skipped (so are null dataset values).
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "className") node.className = value;
      else if (key === "dataset") {
        for (const [name, v] of Object.entries(value)) {
          if (v !== null && v !== undefined) node.dataset[name] = v;
        }
      }
      else if (key === "onClick") node.addEventListener("click", value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    node.replaceChildren();
    return node;
  }

  // Replace a node's children, skipping null ones (DOM `append` would write "null").
  function fill(node, ...children) {
    node.replaceChildren();
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  async function api(path, params) {
    const url = new URL(path, window.location.origin);
    for (const [key, value] of Object.entries(params || {})) {
      if (value !== "" && value !== null && value !== undefined && value !== false) {
        url.searchParams.set(key, String(value));
      }
    }
    const res = await fetch(url, { headers: { Accept: "application/json" } });
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const err = new Error(body && body.error ? body.error : `HTTP ${res.status}`);
      err.code = body && body.code ? body.code : String(res.status);
      throw err;
    }
    return body;
  }

  function showError(err) {
    $("error-text").textContent = err.code ? `${err.code}: ${err.message}` : err.message;
    $("error").hidden = false;
  }

  // An event handler that reports its failure in the error banner.
  const guard = (fn) => (...args) => Promise.resolve(fn(...args)).catch(showError);

  const fullTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  const clockTime = new Intl.DateTimeFormat(undefined, {
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
  const fmt = (iso) => (iso ? fullTime.format(new Date(iso)) : "–");
  const dayOnly = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });
  const timeOnly = new Intl.DateTimeFormat(undefined, { timeStyle: "short" });
  // Today: the time; before: the day.
  function compact(iso) {
    const d = new Date(iso);
    return d.toDateString() === new Date().toDateString() ? timeOnly.format(d) : dayOnly.format(d);
  }

  function ago(iso) {
    if (!iso) return "";
    const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
    if (s < 45) return "just now";
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  // From now on: "in 5 min", "in 3 h", "in 2 d".
  function fromNow(iso) {
    const s = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
    if (s <= 0) return "due now";
    if (s < 3600) return `in ${Math.max(1, Math.round(s / 60))} min`;
    if (s < 86400) return `in ${Math.round(s / 3600)} h`;
    return `in ${Math.round(s / 86400)} d`;
  }

  // Seconds in the largest unit that divides them: 86400 → "1 d", 5400 → "90 min".
  function duration(s) {
    for (const [unit, n] of [["d", 86400], ["h", 3600], ["min", 60]]) {
      if (s >= n && s % n === 0) return `${s / n} ${unit}`;
    }
    return `${s} s`;
  }

  // An instant the page shows: as text in the reader's time zone, exact in `datetime`.
  const instant = (iso) => el("time", { datetime: iso, title: iso }, fmt(iso));

  // An ISO instant as a datetime-local input's value (local time, to the second), and back.
  function toLocalInput(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return "";
    return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
  }

  function fromLocalInput(value) {
    const d = new Date(value);
    return value && !Number.isNaN(d.getTime()) ? d.toISOString() : "";
  }

  // v3: whether a memory holds now. Superseded (a newer one replaced it), ended (its
  // `valid_until` has passed) or not yet valid (its `valid_from` is ahead); null: it holds.
  function standing(m) {
    const now = Date.now();
    if (m.superseded_by) return "superseded";
    if (m.valid_until && new Date(m.valid_until).getTime() <= now) return "ended";
    if (m.valid_from && new Date(m.valid_from).getTime() > now) return "future";
    return null;
  }

  const STANDING_LABELS = { superseded: "superseded", ended: "ended", future: "not yet valid" };

  function standingBadge(m, testid) {
    const state = standing(m);
    if (!state) return null;
    const title = {
      superseded: `Replaced by ${m.superseded_by}`,
      ended: `Held until ${m.valid_until ? fmt(m.valid_until) : ""}`,
      future: `Holds from ${m.valid_from ? fmt(m.valid_from) : ""}`,
    }[state];
    return el(
      "span",
      { className: "badge mark", title, dataset: { mark: state, testid: testid || "mark" } },
      STANDING_LABELS[state],
    );
  }

  const short = (text, n) => (text.length > n ? `${text.slice(0, n)}…` : text);
  const asText = (v) => (typeof v === "string" ? v : JSON.stringify(v));

  function rememberWorkflow(wf) {
    if (!wf || knownWorkflows.has(wf)) return;
    knownWorkflows.add(wf);
    $("workflows").append(el("option", { value: wf }));
  }

  const typeBadge = (type) => el("span", { className: "badge type", dataset: { type } }, type);
  const where = (wf) =>
    el("span", { className: wf ? "where" : "where general", title: "workflow" }, wf || "general");

  function tagChips(tags) {
    return (tags || []).map((t) => el("span", { className: "tag" }, `#${t}`));
  }

  const tagList = (tags) => (tags.length ? el("span", { className: "tags" }, tagChips(tags)) : null);

  // v4: a memory's version (1 when added, +1 on each write) and the key a keyed add named
  // it with (none for most).
  function versionBadge(version) {
    if (version === undefined || version === null) return null;
    return el(
      "span",
      { className: "badge version", title: `version ${version}`, dataset: { testid: "version" } },
      `v${version}`,
    );
  }

  function keyChip(key) {
    if (!key) return null;
    return el("span", { className: "key mono", title: "key", dataset: { testid: "key" } }, key);
  }

  // One memory in a list: compact (`preview`) or full (`content`), with a score in search.
  function memoryItem(m, opts) {
    rememberWorkflow(m.workflow_id);
    const text = m.preview !== undefined ? m.preview : short(m.title || m.content, 240);
    const score = opts && opts.score;
    const item = el(
      "li",
      {
        className: "memory",
        tabindex: 0,
        role: "button",
        dataset: { id: m.id, testid: "memory-item" },
        onClick: () => select(m.id),
      },
      el(
        "div",
        { className: "memory-top" },
        typeBadge(m.type),
        el("span", { className: "memory-text" }, text),
        score !== undefined
          ? el("span", { className: "score", title: "score", dataset: { testid: "score" } },
            score.toFixed(3))
          : null,
      ),
      el(
        "div",
        { className: "memory-meta" },
        standingBadge(m),
        versionBadge(m.version),
        keyChip(m.key),
        where(m.workflow_id),
        m.agent_id ? el("span", { className: "agent" }, m.agent_id) : null,
        tagChips(m.tags),
        el("span", { className: "when", title: m.created_at }, ago(m.created_at)),
      ),
    );
    if (view.selected === m.id) item.classList.add("selected");
    item.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        select(m.id);
      }
    });
    return item;
  }

  function scopeParams() {
    return { workflow: view.workflow, scope: view.scope, workspace: view.workspace };
  }

  // Search and list: the scope, as of the chosen instant (describe has no `as_of`).
  function readParams() {
    return { ...scopeParams(), as_of: view.asOf };
  }

  function setOptions(select, values, current, allLabel) {
    const wanted = [...new Set([...values, ...(current ? [current] : [])])].sort();
    clear(select).append(el("option", { value: "" }, allLabel));
    for (const v of wanted) select.append(el("option", { value: v }, v));
    select.value = current;
  }

  // ---------------------------------------------------------------- overview

  async function loadOverview() {
    const d = await api("/api/describe", scopeParams());
    $("stat-total").textContent = String(d.total);
    // The list leaves superseded and ended memories out (unless asked): name them, so that
    // its total and this one visibly count different things.
    $("stat-superseded").textContent = d.superseded_count
      ? `${d.superseded_count} superseded or ended, left out of the list`
      : "";
    // Idle-bounded: forgotten once no read returns them for their idle_ttl_s (null: the
    // bus is recounting and cannot say now).
    $("stat-idle").textContent =
      d.idle_count === null || d.idle_count === undefined
        ? ""
        : d.idle_count
          ? `${d.idle_count} idle-bounded, forgotten once unread`
          : "";
    $("stat-workflow").textContent = String(d.workflow_count);
    $("stat-general").textContent = String(d.general_count);
    $("stat-oldest").textContent = fmt(d.oldest);
    $("stat-newest").textContent = fmt(d.newest);
    $("stat-embedder").textContent = `${d.embedder} · ${d.dimension}d`;

    const byType = Object.entries(d.by_type).sort((a, b) => b[1] - a[1]);
    clear($("by-type")).append(
      ...byType.map(([type, n]) =>
        el(
          "button",
          {
            type: "button",
            className: "chip",
            dataset: { type, testid: "type-chip" },
            title: `List only ${type}`,
            onClick: () => setFilter("type", type),
          },
          typeBadge(type),
          el("span", { className: "chip-count" }, String(n)),
        ),
      ),
    );
    if (!byType.length) $("by-type").append(el("span", { className: "note" }, "no memories"));
    clear($("tags")).append(
      ...d.tags.map((t) =>
        el(
          "button",
          {
            type: "button",
            className: "chip tag-chip",
            dataset: { tag: t },
            onClick: () => setFilter("tag", t),
          },
          `#${t}`,
        ),
      ),
    );
    if (d.tags_truncated) $("tags").append(el("span", { className: "note" }, "…"));
    if (!d.tags.length) $("tags").append(el("span", { className: "note" }, "no tags"));

    setOptions($("type-filter"), Object.keys(d.by_type), view.type, "all types");
    setOptions($("tag-filter"), d.tags, view.tag, "all tags");

    let note;
    if (view.workspace && !view.workflow) {
      note = `Every memory of workspace “${view.workspace}”, whatever workflow wrote it.`;
    } else if (!view.workflow || view.scope === "general") {
      note =
        "Reads without a workflow see the general memories only (the bus scopes them so): " +
        "enter a workflow above to include its memories.";
    } else {
      note = `Workflow “${view.workflow}”: ${
        view.scope === "both" ? "its memories and the general ones" : "its memories only"
      }.`;
    }
    if (view.asOf) {
      note += ` Search and the list show what held on ${fmt(view.asOf)}; these counts are of now.`;
    }
    $("scope-note").textContent = note;
  }

  // ---------------------------------------------------------------- list

  // Each load is numbered: when filters change faster than the bus answers, the replies may
  // come back out of order, and only the newest request's may be shown.
  let listLoads = 0;

  async function loadList() {
    const mine = ++listLoads;
    const reply = await api("/api/list", {
      ...readParams(),
      type: view.type,
      tag: view.tag,
      superseded: view.superseded ? "1" : "",
      limit: PAGE,
      offset: view.offset,
    });
    if (mine !== listLoads) return;
    const list = clear($("memory-list"));
    list.append(...reply.memories.map((m) => memoryItem(m)));
    if (!reply.memories.length) list.append(el("li", { className: "empty" }, "Nothing here."));
    if (view.asOf) $("list-count").textContent = `${reply.total} as of ${fmt(view.asOf)}`;
    else {
      $("list-count").textContent = view.superseded
        ? `${reply.total} total, superseded and ended included`
        : `${reply.total} current`;
    }
    const last = view.offset + reply.count;
    $("page-info").textContent = reply.count ? `${view.offset + 1}–${last} of ${reply.total}` : "";
    $("page-prev").disabled = view.offset === 0;
    $("page-next").disabled = last >= reply.total;
  }

  function setFilter(name, value) {
    view[name] = value;
    view.offset = 0;
    $(`${name}-filter`).value = value;
    guard(loadList)();
  }

  // ---------------------------------------------------------------- search

  async function runSearch() {
    const q = $("search-input").value.trim();
    const results = clear($("search-results"));
    const summary = $("search-summary");
    if (!q) {
      summary.hidden = true;
      return;
    }
    const reply = await api("/api/search", {
      ...readParams(),
      q,
      mode: $("search-mode").value,
      type: view.type,
      tag: view.tag,
    });
    summary.hidden = false;
    summary.textContent =
      `${reply.results.length} result${reply.results.length === 1 ? "" : "s"} · ${reply.mode}` +
      (view.asOf ? ` · as of ${fmt(view.asOf)}` : "") +
      (reply.truncated ? " · truncated" : "");
    results.append(...reply.results.map((m) => memoryItem(m, { score: m.score })));
  }

  // ---------------------------------------------------------------- detail

  function select(id) {
    const hash = `#memory=${encodeURIComponent(id)}`;
    if (window.location.hash === hash) guard(loadDetail)(id);
    else window.location.hash = hash;
  }

  function field(dl, label, value) {
    if (value === null || value === undefined || value === "") return;
    if (Array.isArray(value) && !value.length) return;
    if (typeof value === "object" && !Array.isArray(value) && !(value instanceof Node)
      && !Object.keys(value).length) return;
    let shown = value;
    if (Array.isArray(value)) shown = el("ul", { className: "plain" }, value.map((v) => el("li", {}, v)));
    else if (typeof value === "object" && !(value instanceof Node)) {
      shown = el("pre", { className: "json" }, JSON.stringify(value, null, 2));
    }
    dl.append(el("dt", {}, label), el("dd", {}, shown));
  }

  function link(id) {
    return el("a", { href: `#memory=${encodeURIComponent(id)}`, className: "mono" }, id);
  }

  function historyEntry(h) {
    const changes = Object.entries(h.changes || {}).map(([name, c]) =>
      el(
        "li",
        { className: "change" },
        el("span", { className: "field" }, name),
        c.old !== null && c.old !== undefined
          ? el("span", { className: "old" }, short(asText(c.old), 160))
          : null,
        c.old !== null && c.old !== undefined ? " → " : "",
        el("span", { className: "new" }, c.new === null ? "∅" : short(asText(c.new), 160)),
      ),
    );
    return el(
      "li",
      { className: "hist", dataset: { testid: "history-entry", event: h.event } },
      el(
        "div",
        { className: "hist-top" },
        el("span", { className: "badge action", dataset: { action: h.event } }, h.event),
        el("span", { className: "when", title: h.at }, fmt(h.at)),
        h.agent_id ? el("span", { className: "agent" }, h.agent_id) : null,
      ),
      changes.length ? el("ul", { className: "changes" }, changes) : null,
    );
  }

  async function loadDetail(id) {
    view.selected = id;
    for (const node of document.querySelectorAll(".memory.selected")) {
      node.classList.remove("selected");
    }
    for (const node of document.querySelectorAll(".memory")) {
      if (node.dataset.id === id) node.classList.add("selected");
    }
    const box = $("detail");
    let m;
    try {
      m = await api(`/api/memory/${encodeURIComponent(id)}`);
    } catch (err) {
      fill(box, 
        el("p", { className: "empty", dataset: { testid: "detail-error" } }, err.message),
      );
      throw err;
    }
    if (view.selected !== id) return; // another memory was picked meanwhile
    rememberWorkflow(m.workflow_id);
    const dl = el("dl", { className: "fields" });
    field(dl, "Key", m.key ? el("span", { className: "mono", dataset: { testid: "detail-key" } }, m.key) : null);
    field(dl, "Version", el("span", { dataset: { testid: "detail-version" } }, String(m.version)));
    field(dl, "Workflow", m.workflow_id || "general");
    field(dl, "Agent", m.agent_id);
    field(dl, "Workspace", m.workspace);
    field(dl, "Store", m.store);
    field(dl, "Importance", m.importance.toFixed(2));
    field(dl, "Mentions", m.mention_count > 1 ? String(m.mention_count) : null);
    field(dl, "Tags", tagList(m.tags));
    field(dl, "Created", fmt(m.created_at));
    field(dl, "Updated", m.updated_at !== m.created_at ? fmt(m.updated_at) : null);
    // v3: when the fact held in the world (null bounds are open), and idle forgetting.
    field(
      dl,
      "Valid",
      el(
        "span",
        { dataset: { testid: "detail-valid" } },
        m.valid_from ? instant(m.valid_from) : el("span", { className: "muted" }, "from creation"),
        " → ",
        m.valid_until ? instant(m.valid_until) : el("span", { className: "muted" }, "open-ended"),
      ),
    );
    field(
      dl,
      "Expires",
      el(
        "span",
        { dataset: { testid: "detail-expires" } },
        m.expires_at
          ? [instant(m.expires_at), el("span", { className: "muted" }, ` · ${fromNow(m.expires_at)}`)]
          : "never",
      ),
    );
    field(
      dl,
      "Idle TTL",
      m.idle_ttl_s
        ? el(
          "span",
          { title: `${m.idle_ttl_s} s`, dataset: { testid: "detail-idle" } },
          `forgotten after ${duration(m.idle_ttl_s)} without a read`,
        )
        : null,
    );
    field(dl, "Accessed", m.access_count ? `${m.access_count}× · last ${fmt(m.last_accessed_at)}` : null);
    field(dl, "Session", m.session_id);
    field(dl, "Source", m.source);
    field(dl, "Facts", m.facts);
    field(dl, "Narrative", m.narrative);
    field(dl, "Files", m.related_files);
    field(dl, "People", m.related_people);
    field(dl, "Superseded by", m.superseded_by ? link(m.superseded_by) : null);
    field(dl, "Metadata", m.metadata);

    const history = el("ol", { className: "history", dataset: { testid: "history" } });
    const timeline = el("ol", { className: "timeline", dataset: { testid: "timeline" } });
    fill(box, 
      el(
        "div",
        { className: "detail-head" },
        el("span", { dataset: { testid: "detail-type" } }, typeBadge(m.type)),
        standingBadge(m, "detail-mark"),
        el("span", { className: "mono muted", dataset: { testid: "detail-id" } }, m.id),
      ),
      m.title ? el("h2", { className: "detail-title", dataset: { testid: "detail-title" } }, m.title) : null,
      el("pre", { className: "content", dataset: { testid: "detail-content" } }, m.content),
      dl,
      el("h3", {}, "History"),
      history,
      el("h3", {}, "Timeline"),
      timeline,
    );

    const [hist, tl] = await Promise.allSettled([
      api(`/api/history/${encodeURIComponent(id)}`),
      // Its own workflow's view (an empty `workflow`: the general memories).
      api(`/api/timeline/${encodeURIComponent(id)}?workflow=${encodeURIComponent(m.workflow_id || "")}`),
    ]);
    if (view.selected !== id) return;
    if (hist.status === "fulfilled") {
      history.append(...hist.value.entries.map(historyEntry));
      if (hist.value.truncated) history.append(el("li", { className: "note" }, "… older entries cut"));
    } else {
      history.append(el("li", { className: "note" }, hist.reason.message));
    }
    if (tl.status === "fulfilled") {
      tl.value.memories.forEach((c, i) => {
        const anchor = i === tl.value.anchor_index;
        const state = standing(c);
        timeline.append(
          el(
            "li",
            {
              className: anchor ? "tl anchor" : "tl",
              "aria-current": anchor ? "true" : null,
              dataset: { testid: "timeline-item", id: c.id, mark: state },
              onClick: () => (anchor ? null : select(c.id)),
            },
            el("span", { className: "when", title: fmt(c.created_at) }, compact(c.created_at)),
            typeBadge(c.type),
            versionBadge(c.version),
            el("span", { className: "tl-text" }, standingBadge(c), state ? " " : null, c.preview),
          ),
        );
      });
    } else {
      timeline.append(el("li", { className: "note" }, tl.reason.message));
    }
  }

  function onHash() {
    const match = /^#memory=(.+)$/.exec(window.location.hash);
    if (match) guard(loadDetail)(decodeURIComponent(match[1]));
  }

  // ---------------------------------------------------------------- workspaces

  async function loadWorkspaces() {
    const reply = await api("/api/workspaces");
    const list = clear($("workspaces"));
    const filter = $("workspace-filter");
    const current = view.workspace;
    clear(filter).append(el("option", { value: "" }, "any"));
    for (const w of reply.data) {
      filter.append(el("option", { value: w.name }, w.name));
      list.append(
        el(
          "li",
          {
            className: "ws",
            tabindex: 0,
            role: "button",
            dataset: { name: w.name, testid: "workspace-item" },
            onClick: guard(() => openWorkspace(w.name)),
          },
          el("span", { className: "ws-name" }, w.name),
          w.description ? el("span", { className: "ws-desc" }, w.description) : null,
        ),
      );
    }
    filter.value = current;
    $("workspace-count").textContent = reply.data.length ? String(reply.data.length) : "";
    if (!reply.data.length) list.append(el("li", { className: "empty" }, "No workspaces."));
  }

  async function openWorkspace(name) {
    for (const node of document.querySelectorAll(".ws")) {
      node.classList.toggle("selected", node.dataset.name === name);
    }
    const reply = await api(`/api/workspaces/${encodeURIComponent(name)}`);
    const w = reply.workspace;
    const dl = el("dl", { className: "fields" });
    field(dl, "Purpose", w.purpose);
    field(dl, "Root", el("span", { className: "mono" }, w.root_folder));
    field(dl, "Workflows", w.workflows);
    field(dl, "Key files", w.key_files);
    field(dl, "Preferences", w.preferences);
    field(dl, "Created", fmt(w.created_at));
    const states = el("ul", { className: "states", dataset: { testid: "states" } });
    for (const s of reply.states) {
      states.append(
        el(
          "li",
          {
            className: s.is_archived ? "state archived" : "state",
            tabindex: 0,
            role: "button",
            dataset: { name: s.name, testid: "state-item" },
            onClick: guard(() => openState(name, s.name)),
          },
          el("span", { className: "state-name" }, s.name),
          s.description ? el("span", { className: "ws-desc" }, s.description) : null,
          s.is_archived ? el("span", { className: "badge" }, "archived") : null,
        ),
      );
    }
    if (!reply.states.length) states.append(el("li", { className: "empty" }, "No states saved."));
    fill($("workspace-detail"), 
      el(
        "div",
        { className: "detail-head" },
        el("h3", { dataset: { testid: "workspace-name" } }, w.name),
        el(
          "button",
          {
            type: "button",
            className: "ghost small",
            onClick: () => {
              $("workspace-filter").value = w.name;
              applyScope();
            },
          },
          "show its memories",
        ),
      ),
      w.description ? el("p", { className: "muted" }, w.description) : null,
      dl,
      el("h3", {}, "States"),
      states,
      el("div", { id: "state-detail", dataset: { testid: "state-detail" } }),
    );
  }

  async function openState(workspace, name) {
    const s = await api(
      `/api/states/${encodeURIComponent(workspace)}/${encodeURIComponent(name)}`,
    );
    const dl = el("dl", { className: "fields" });
    field(dl, "Active task", s.active_task);
    field(dl, "Next steps", s.next_steps);
    field(dl, "Active files", s.active_files);
    field(dl, "Context", s.conversation_context);
    field(dl, "Tags", tagList(s.tags));
    field(dl, "Saved", `${fmt(s.created_at)}${s.agent_id ? ` by ${s.agent_id}` : ""}`);
    fill($("state-detail"), 
      el(
        "div",
        { className: "state-box" },
        el(
          "div",
          { className: "detail-head" },
          el("h4", {}, s.name),
          el(
            "button",
            { type: "button", className: "ghost small", onClick: () => select(s.id) },
            "open its memory",
          ),
        ),
        s.description ? el("p", { className: "muted" }, s.description) : null,
        dl,
      ),
    );
  }

  // ---------------------------------------------------------------- live events

  let refreshTimer = null;
  // Many events in a burst: refresh the overview once they settle.
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(guard(loadOverview), 700);
  }

  function setStatus(state, text) {
    const node = $("events-status");
    node.dataset.state = state;
    node.textContent = text;
  }

  function addEvent(ev, rejected) {
    const list = $("events");
    $("events-empty").hidden = true;
    let item;
    if (rejected) {
      item = el(
        "li",
        { className: "event", dataset: { testid: "event", action: "rejected" } },
        el(
          "div",
          { className: "event-top" },
          el("span", { className: "when" }, clockTime.format(new Date())),
          el("span", { className: "badge action", dataset: { action: "rejected" } }, "rejected"),
          el("span", { className: "mono" }, ev.code),
        ),
        el("div", { className: "event-text" }, `${ev.error} (request ${ev.request_id})`),
      );
    } else {
      rememberWorkflow(ev.workflow_id);
      const openable = ev.action !== "deleted";
      item = el(
        "li",
        {
          className: openable ? "event openable" : "event",
          dataset: { testid: "event", id: ev.id, action: ev.action },
          title: openable ? "Open this memory" : null,
          onClick: openable ? () => select(ev.id) : null,
        },
        el(
          "div",
          { className: "event-top" },
          el("span", { className: "when", title: ev.at }, clockTime.format(new Date(ev.at))),
          el("span", { className: "badge action", dataset: { action: ev.action } }, ev.action),
          typeBadge(ev.type),
          versionBadge(ev.version),
          where(ev.workflow_id),
          ev.agent_id ? el("span", { className: "agent" }, ev.agent_id) : null,
        ),
        el("div", { className: "event-text" }, ev.preview),
      );
      if (view.selected === ev.id && openable) guard(loadDetail)(ev.id);
    }
    list.prepend(item);
    while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
    refreshSoon();
  }

  function connectEvents() {
    const source = new EventSource("/api/events");
    source.addEventListener("ready", () => setStatus("live", "live"));
    source.addEventListener("message", (e) => addEvent(JSON.parse(e.data), false));
    source.addEventListener("rejected", (e) => addEvent(JSON.parse(e.data), true));
    // EventSource reconnects by itself (after the server's `retry`).
    source.addEventListener("error", () => setStatus("down", "reconnecting…"));
  }

  // ---------------------------------------------------------------- wiring

  function applyScope() {
    view.workflow = $("workflow").value.trim();
    view.scope = $("scope").value;
    view.workspace = $("workspace-filter").value;
    view.asOf = fromLocalInput($("as-of").value);
    view.offset = 0;
    // As of an instant, `include_superseded` is moot: what held then is read.
    $("superseded").disabled = Boolean(view.asOf);
    $("as-of-now").hidden = !view.asOf;
    const params = new URLSearchParams();
    if (view.workflow) params.set("workflow", view.workflow);
    if (view.scope !== "both") params.set("scope", view.scope);
    if (view.workspace) params.set("workspace", view.workspace);
    if (view.asOf) params.set("as_of", view.asOf);
    const query = params.toString();
    const { pathname, hash } = window.location;
    window.history.replaceState(null, "", `${pathname}${query ? `?${query}` : ""}${hash}`);
    guard(loadOverview)();
    guard(loadList)();
    if ($("search-input").value.trim()) guard(runSearch)();
  }

  function start() {
    const params = new URLSearchParams(window.location.search);
    $("workflow").value = params.get("workflow") || "";
    $("scope").value = params.get("scope") || "both";
    view.workspace = params.get("workspace") || "";
    $("as-of").value = toLocalInput(params.get("as_of") || "");

    $("scope-form").addEventListener("submit", (e) => {
      e.preventDefault();
      applyScope();
    });
    $("workspace-filter").addEventListener("change", applyScope);
    $("as-of-now").addEventListener("click", () => {
      $("as-of").value = "";
      applyScope();
    });
    $("scope").addEventListener("change", applyScope);
    $("search-form").addEventListener("submit", (e) => {
      e.preventDefault();
      guard(runSearch)();
    });
    $("type-filter").addEventListener("change", (e) => setFilter("type", e.target.value));
    $("tag-filter").addEventListener("change", (e) => setFilter("tag", e.target.value));
    $("superseded").addEventListener("change", (e) => {
      view.superseded = e.target.checked;
      view.offset = 0;
      guard(loadList)();
    });
    $("list-refresh").addEventListener("click", () => {
      guard(loadOverview)();
      guard(loadList)();
      guard(loadWorkspaces)();
    });
    $("page-prev").addEventListener("click", () => {
      view.offset = Math.max(0, view.offset - PAGE);
      guard(loadList)();
    });
    $("page-next").addEventListener("click", () => {
      view.offset += PAGE;
      guard(loadList)();
    });
    $("error-close").addEventListener("click", () => {
      $("error").hidden = true;
    });
    window.addEventListener("hashchange", onHash);

    guard(async () => {
      const info = await api("/api/info");
      $("namespace").textContent = info.namespace;
      document.title = `${info.namespace} · memory-bus`;
    })();
    connectEvents();
    guard(loadWorkspaces)().then(() => {
      $("workspace-filter").value = view.workspace;
      applyScope();
    });
    onHash();
  }

  start();
})();
