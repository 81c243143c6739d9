// The page: a collection picker, a text box, an image drop zone; results as thumbnails or a ranked list.
// Clicking a result searches "more like this" (POST /search with its id). No build step, no dependencies.
"use strict";
const $ = (id) => document.getElementById(id);
let collections = {};

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
    if (last && collections[last]) select.value = last;
    if (!list.length) showError("no collections on this server: build one with `engine build`");
  } catch (e) {
    showError(e.message);
  }
}

function render(result, label) {
  $("error").hidden = true;
  const c = collections[result.collection] || {};
  const images = c.kind === "image";
  const box = $("results");
  box.innerHTML = "";
  const holder = document.createElement(images ? "div" : "ol");
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
    item.addEventListener("click", () => search({ id: hit.id }, `more like ${hit.id}`));
    holder.appendChild(item);
  }
  box.appendChild(holder);
  $("status").textContent = `${label}: ${result.hits.length} results in ${result.took_ms.toFixed(1)} ms ` +
    `(server), ${result.roundtrip_ms.toFixed(1)} ms round trip`;
}

async function search(query, label) {
  const collection = $("collection").value;
  if (!collection) return showError("pick a collection first");
  localStorage.setItem("engine-collection", collection);
  $("status").textContent = "searching…";
  try {
    const body = Object.assign({ collection, k: Number($("k").value) }, query);
    render(await call("/search", { method: "POST", headers: headers({ "Content-Type": "application/json" }),
                                   body: JSON.stringify(body) }), label);
  } catch (e) {
    showError(e.message);
  }
}

async function searchImage(file) {
  const collection = $("collection").value;
  if (!collection) return showError("pick a collection first");
  const form = new FormData();
  form.append("collection", collection);
  form.append("k", $("k").value);
  form.append("image", file, file.name);
  $("status").textContent = "searching…";
  try {
    render(await call("/search", { method: "POST", headers: headers(), body: form }), `image ${file.name}`);
  } catch (e) {
    showError(e.message);
  }
}

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("query").value.trim();
  if (text) search({ text }, `"${text}"`);
});
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
