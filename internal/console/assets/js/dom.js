// Small DOM helpers: every text goes in as a text node (never HTML), so an
// event's note or labels cannot inject markup.

// h builds an element: h('a', {href: '#'}, 'text', child…). Attributes
// starting with "on" are listeners; null/false attributes are left out.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// field is a labelled input; its id is derived from name.
export function field(label, name, value, attrs = {}) {
  const id = 'f-' + name.replace(/[^a-z0-9]/gi, '-');
  return h('div', {class: 'field'},
    h('label', {for: id}, label),
    h('input', {id, name, value: value || '', autocomplete: 'off', spellcheck: 'false', ...attrs}));
}

export function select(label, name, value, options) {
  const id = 'f-' + name.replace(/[^a-z0-9]/gi, '-');
  return h('div', {class: 'field'},
    h('label', {for: id}, label),
    h('select', {id, name}, options.map(([v, text]) => h('option', {value: v, selected: v === value}, text))));
}

// fmtTime shows a time in the browser's zone, to the second.
export function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  if (isNaN(d)) return s;
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// ago is kubectl's LAST SEEN: 5s, 3m, 2h, 4d.
export function ago(s, now = Date.now()) {
  if (!s) return '';
  const sec = Math.max(0, Math.round((now - new Date(s)) / 1000));
  if (sec < 120) return sec + 's';
  if (sec < 7200) return Math.round(sec / 60) + 'm';
  if (sec < 172800) return Math.round(sec / 3600) + 'h';
  return Math.round(sec / 86400) + 'd';
}

export function objectRef(o) {
  if (!o || !o.kind) return '';
  return `${o.kind.toLowerCase()}/${o.name || ''}`;
}

// occurrences of an event: its series count, or 1.
export function occurrences(ev) {
  return ev.series && ev.series.count ? Number(ev.series.count) : 1;
}

export function lastSeen(ev) {
  return (ev.series && ev.series.lastObservedTime) || ev.eventTime;
}

export function tenantText(t) {
  if (!t || !t.type) return '';
  return t.name ? `${t.type}/${t.name}` : t.type;
}

// typeClass styles a row by its type (Warning stands out).
export function typeClass(type) {
  return type === 'Warning' ? 'warn' : '';
}
