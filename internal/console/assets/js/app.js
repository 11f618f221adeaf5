// The console's shell: the router over location.hash (so every view's URL
// can be shared and reloaded), the token form, the tenant picker and the
// error banner.
import * as api from './api.js';
import {h} from './dom.js';
import * as tail from './tail.js';
import * as search from './search.js';
import * as top from './top.js';
import * as series from './series.js';
import * as detail from './detail.js';
import * as rules from './rules.js';

const views = {tail, search, top, series, rules, event: detail.event, timeline: detail.timeline};

const main = document.getElementById('main');
const errorBox = document.getElementById('error');
let cleanup = null;
let routed = false; // the first view of a page load leaves focus where the browser puts it

export function showError(err) {
  if (err && err.name === 'AbortError') return;
  errorBox.replaceChildren(h('span', {}, String(err && err.message ? err.message : err)));
  errorBox.hidden = false;
}

export function clearError() {
  errorBox.hidden = true;
  errorBox.replaceChildren();
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const name = (q < 0 ? raw : raw.slice(0, q)) || 'tail';
  const params = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  return {name, params};
}

// navigate sets the view and its parameters in the URL (the router renders).
export function navigate(name, params) {
  const qs = params ? new URLSearchParams(params).toString() : '';
  const next = '#/' + name + (qs ? '?' + qs : '');
  if (location.hash === next) route();
  else location.hash = next;
}

function route() {
  if (cleanup) { cleanup(); cleanup = null; }
  clearError();
  const {name, params} = parseHash();
  const view = views[name] || tail;
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const t = params.get('tenant');
  if (t !== null && t !== api.tenant()) pickTenant(t);
  main.replaceChildren();
  cleanup = view.render(main, params, {showError, clearError, navigate}) || null;
  // The control that led here is gone with the old view: keyboard and
  // screen-reader users continue at the new view, not the top of the page.
  if (routed && (!document.activeElement || document.activeElement === document.body)) main.focus({preventScroll: true});
  routed = true;
}

// --- token and tenant -----------------------------------------------------

const tokenInput = document.getElementById('token');
const tenantSelect = document.getElementById('tenant');

document.getElementById('auth-form').addEventListener('submit', (e) => {
  e.preventDefault();
  api.setToken(tokenInput.value.trim());
  tokenInput.value = '';
  showTokenState();
  loadTenants().then(route);
});
document.getElementById('token-forget').addEventListener('click', () => {
  api.setToken('');
  api.setTenant('');
  showTokenState();
  loadTenants().then(route);
});
tenantSelect.addEventListener('change', () => {
  api.setTenant(tenantSelect.value);
  const {name, params} = parseHash();
  if (params.has('tenant')) {
    if (tenantSelect.value) params.set('tenant', tenantSelect.value); else params.delete('tenant');
    navigate(name, params);
  } else route();
});

function showTokenState() {
  tokenInput.placeholder = api.token() ? 'token set (enter another to replace)' : 'bearer token (optional)';
}

function pickTenant(t) {
  if (t && ![...tenantSelect.options].some((o) => o.value === t)) {
    tenantSelect.append(h('option', {value: t}, t));
  }
  tenantSelect.value = t;
  api.setTenant(t);
}

// loadTenants fills the picker with the tenants the token may read: the
// tenant facet of the last 30 days (the API answers it only to a caller of
// several tenants), else the tenant of the newest event it may query.
async function loadTenants() {
  const found = new Set();
  try {
    const since = new Date(Date.now() - 30 * 86400e3).toISOString();
    const f = await api.get('/v1/analytics/facets', [['dimensions', 'tenant'], ['since', since], ['limit', '200']]);
    for (const v of (f.facets && f.facets[0] && f.facets[0].values) || []) found.add(v.value);
  } catch (err) {
    if (err.status === 401) { showError(err); return; }
    try {
      const q = await api.get('/v1/events', [['pageSize', '1']]);
      const t = q.events && q.events[0] && q.events[0].tenant;
      if (t && t.type) found.add(t.name ? `${t.type}/${t.name}` : t.type);
    } catch { /* no tenant to offer: "All my tenants" stays */ }
  }
  const current = api.tenant();
  tenantSelect.replaceChildren(h('option', {value: ''}, 'All my tenants'),
    ...[...found].sort().map((t) => h('option', {value: t}, t)));
  if (current) pickTenant(current);
}

window.addEventListener('hashchange', route);
showTokenState();
tenantSelect.value = '';
if (api.tenant()) pickTenant(api.tenant());
route();
loadTenants();
