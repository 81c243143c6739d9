// The page: a collection picker, a text box, an image drop zone; results as thumbnails or a ranked list.
// Clicking a result searches "more like this" (POST /search with its id). No build step, no dependencies.
// A text or "more like this" search is in the URL (/?collection=NAME&q=TEXT&k=10, or &id=ITEM instead of q),
// with the search options when set (&mode=hybrid&fusion=rrf&where=year>=2020&rerank=1): a result can be linked
// and bookmarked, and the back button returns to the previous search. When the server serves pipelines, a
// pipeline picker beside the collection picker runs text and "more like this" searches through the one chosen
// (&pipeline=NAME in the URL); its options apply to the pipeline's first stage.
"use strict";
const $ = (id) => document.getElementById(id);
let collections = {};
let pipelines = {};

function key() { return $("apikey").value || localStorage.getItem("engine-api-key") || ""; }
function headers(extra) { const h = Object.assign({}, extra || {}); if (key()) h["X-API-Key"] = key(); return h; }
function withKey(url) { return key() ? url + (url.includes("?") ? "&" : "?") + "api_key=" + encodeURIComponent(key()) : url; }

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = false;
  $("status").textContent = "";
}

async function call(url, options) {
  const started = performance.now();
  let response;
  try {
    response = await fetch(url, options);
  } catch (e) {
    throw new Error("the server cannot be reached: " + e.message);
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.detail || ("HTTP " + response.status));
  body.roundtrip_ms = performance.now() - started;
  return body;
}

async function loadCollections() {
  try {
    const health = await call("/health", { headers: headers() });
    $("apikey").hidden = !health.auth;
    $("rerank-box").hidden = !(health.rerankers || []).length;
    await loadPipelines();
    const list = await call("/collections", { headers: headers() });
    const select = $("collection");
    select.innerHTML = "";
    for (const c of list) {
      if (c.error) continue;
      collections[c.name] = c;
      const option = document.createElement("option");
      option.value = c.name;
      option.textContent = `${c.name} (${c.kind}, ${c.count})`;
      select.appendChild(option);
    }
    const last = localStorage.getItem("engine-collection");
    const firstImage = Object.values(collections).find(takesImages);
    if (last && collections[last]) select.value = last;
    else if (firstImage) select.value = firstImage.name;
    showDrop();
    if (!list.length) showError("no collections on this server: build one with `engine build`");
    else fromUrl();
  } catch (e) {
    showError(e.message);
  }
}

// the pipelines the server serves (GET /pipelines), offered beside the collections when there are any
async function loadPipelines() {
  const list = await call("/pipelines", { headers: headers() });
  const select = $("pipeline");
  select.innerHTML = '<option value="">none</option>';
  pipelines = {};
  for (const p of list) {
    pipelines[p.name] = p;
    const option = document.createElement("option");
    option.value = p.name;
    option.textContent = p.name;
    option.title = p.pipeline;
    select.appendChild(option);
  }
  $("pipeline-box").hidden = !list.length;
}

function pipeline() { return $("pipeline").value; }

function takesImages(c) { return Boolean(c && (c.queries || []).includes("image")); }

// the drop zone only for a collection whose encoder takes images
// (for a pipeline: its first stage's collection; a pipeline carries its own rerankers: no rerank switch)
function showDrop() {
  $("drop").hidden = !takesImages(collections[pipeline() ? homeOf(pipeline()) : $("collection").value]);
  $("rerank").disabled = Boolean(pipeline());
}

// the search options the controls hold, only those set (what the request and the URL carry)
function optionsOf() {
  const out = {};
  if ($("mode").value) out.mode = $("mode").value;
  if ($("fusion").value !== "weighted") out.fusion = $("fusion").value;
  if ($("where").value.trim()) out.where = $("where").value.trim();
  if ($("rerank").checked && !$("rerank-box").hidden && !pipeline()) out.rerank = true;
  return out;
}

function setOptions(options) {
  $("mode").value = ["dense", "bm25", "hybrid"].includes(options.mode) ? options.mode : "";
  $("fusion").value = options.fusion === "rrf" ? "rrf" : "weighted";
  $("where").value = options.where || "";
  $("rerank").checked = Boolean(options.rerank);
}

// the search a URL names: {collection, k, options, query: {text} or {id}} (query null when it names none)
function stateOf(params) {
  const collection = params.get("collection"), text = params.get("q"), id = params.get("id");
  const pipe = params.get("pipeline") || "";
  const k = Number(params.get("k") || $("k").value);
  const options = {};
  for (const name of ["mode", "fusion", "where"]) if (params.get(name)) options[name] = params.get(name);
  if (params.get("rerank") === "1") options.rerank = true;
  if (!(collection || pipe) || !(text || id)) return { collection, pipeline: pipe, k, options, query: null };
  return { collection, pipeline: pipe, k, options, query: text ? { text } : { id } };
}

function urlOf(collection, k, query, options) {
  const params = new URLSearchParams({ collection });
  if (pipeline()) params.set("pipeline", pipeline());
  if (query.text !== undefined) params.set("q", query.text); else params.set("id", query.id);
  params.set("k", String(k));
  for (const name of ["mode", "fusion", "where"]) if (options[name]) params.set(name, options[name]);
  if (options.rerank) params.set("rerank", "1");
  return "/?" + params.toString();
}

// what a request sends of the options: a lexical mode, fusion and reranking read text, so an id query
// ("more like this") takes only the filter
function requestOptions(query, options) {
  if (query.text !== undefined) return options;
  return options.where ? { where: options.where } : {};
}

function labelOf(query) { return query.text !== undefined ? `"${query.text}"` : `more like ${query.id}`; }

function setK(k) {
  if (!Number.isInteger(k) || k < 1) return;
  const select = $("k");
  if (![...select.options].some((o) => Number(o.value) === k)) {
    const option = document.createElement("option");
    option.textContent = String(k);
    select.appendChild(option);
  }
  select.value = String(k);
}

// show (and run) the search in the address bar: on load and when the back/forward buttons are used
function fromUrl() {
  const state = stateOf(new URLSearchParams(location.search));
  if (state.pipeline && !pipelines[state.pipeline]) return showError(`no pipeline ${JSON.stringify(state.pipeline)} on this server`);
  $("pipeline").value = state.pipeline;
  showDrop();
  if (state.collection) {
    if (!collections[state.collection]) return showError(`no collection ${JSON.stringify(state.collection)} on this server`);
    $("collection").value = state.collection;
    showDrop();
  }
  setK(state.k);
  setOptions(state.options);
  if (!state.query) {  // back to the page without a search
    $("query").value = "";
    $("results").innerHTML = "";
    $("status").textContent = "";
    return;
  }
  $("query").value = state.query.text || "";
  search(state.query, labelOf(state.query), false);
}

function render(result, label, from) {
  $("error").hidden = true;
  const c = collections[from || result.collection] || {};
  const images = c.kind === "image";
  const box = $("results");
  box.innerHTML = "";
  const holder = document.createElement(images ? "div" : "ol");  // numbered by the rank span, not the list
  holder.className = images ? "grid" : "list";
  for (const hit of result.hits) {
    const item = document.createElement(images ? "figure" : "li");
    item.className = "hit";
    item.dataset.id = hit.id;
    item.dataset.rank = hit.rank;
    item.title = "click: more like this";
    if (images && hit.thumb) {
      const img = document.createElement("img");
      img.src = withKey(hit.thumb);
      img.alt = hit.id;
      item.appendChild(img);
    }
    const meta = Object.entries(hit.meta || {}).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`);
    item.insertAdjacentHTML("beforeend",
      `<div><span class="rank">${hit.rank}.</span> <span class="id"></span> <span class="score">${hit.score.toFixed(4)}</span></div>` +
      `<div class="meta"></div><div class="more">more like this</div>`);
    item.querySelector(".id").textContent = hit.id;
    item.querySelector(".meta").textContent = meta.join(" · ").slice(0, 300);
    item.addEventListener("click", () => search({ id: hit.id }, `more like ${hit.id}`, true));
    holder.appendChild(item);
  }
  box.appendChild(holder);
  $("status").textContent = `${label}: ${result.hits.length} results in ${result.took_ms.toFixed(1)} ms ` +
    `(server), ${result.roundtrip_ms.toFixed(1)} ms round trip`;
}

async function search(query, label, remember) {
  const collection = $("collection").value;
  if (!collection) return showError("pick a collection first");
  localStorage.setItem("engine-collection", collection);
  const k = Number($("k").value);
  const options = optionsOf();
  const url = urlOf(collection, k, query, options);
  if (remember && url !== location.pathname + location.search) history.pushState(null, "", url);
  $("status").textContent = "searching…";
  try {
    const target = pipeline() ? { pipeline: pipeline() } : { collection };
    const body = Object.assign(target, { k }, query, requestOptions(query, options));
    render(await call("/search", { method: "POST", headers: headers({ "Content-Type": "application/json" }),
                                   body: JSON.stringify(body) }),
           pipeline() ? `${pipeline()}: ${label}` : label, pipeline() ? homeOf(pipeline()) : collection);
  } catch (e) {
    showError(e.message);
  }
}

// the collection whose items a pipeline ranks (its first stage's), for showing its hits
function homeOf(name) { return (pipelines[name] || {}).collection || $("collection").value; }

async function searchImage(file) {
  const collection = $("collection").value;
  if (!collection) return showError("pick a collection first");
  const form = new FormData();
  if (pipeline()) form.append("pipeline", pipeline()); else form.append("collection", collection);
  form.append("k", $("k").value);
  form.append("image", file, file.name);
  $("status").textContent = "searching…";
  try {
    render(await call("/search", { method: "POST", headers: headers(), body: form }),
           pipeline() ? `${pipeline()}: image ${file.name}` : `image ${file.name}`,
           pipeline() ? homeOf(pipeline()) : collection);
  } catch (e) {
    showError(e.message);
  }
}

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("query").value.trim();
  if (text) search({ text }, `"${text}"`, true);
});
$("collection").addEventListener("change", showDrop);
$("pipeline").addEventListener("change", showDrop);
window.addEventListener("popstate", fromUrl);
$("file").addEventListener("change", () => { if ($("file").files.length) searchImage($("file").files[0]); $("file").value = ""; });
$("apikey").addEventListener("change", () => { localStorage.setItem("engine-api-key", $("apikey").value); loadCollections(); });
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer.files.length) searchImage(e.dataTransfer.files[0]);
});
loadCollections();
