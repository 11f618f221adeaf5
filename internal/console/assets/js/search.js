// Search: Query with the filter fields, selectors and a time range, in keyset
// pages, shown like `kubectl get events -o wide`; above it the time
// histogram (stacked by type or reason; drag across it to zoom the search
// to that range) and the facets, whose values are one-click filters. The
// whole query lives in the URL.
import * as api from './api.js';
import {h, field, select, fmtTime, ago, objectRef, occurrences, lastSeen, typeClass} from './dom.js';
import {stackedBars, dataTable} from './chart.js';

// Facet dimensions and the filter each one sets.
const FACETS = [['type', 'type', 'Type'], ['reason', 'reason', 'Reason'], ['regarding.kind', 'kind', 'Kind'],
  ['namespace', 'namespace', 'Namespace'], ['reportingController', 'controller', 'Controller']];

// Pages already passed, per query, so that Previous can go back to them.
const passed = new Map();

export function stateOf(params) {
  return Object.fromEntries(params);
}

function toLocalInput(d) {
  if (!d) return '';
  const x = new Date(d);
  if (isNaN(x)) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${x.getFullYear()}-${p(x.getMonth() + 1)}-${p(x.getDate())}T${p(x.getHours())}:${p(x.getMinutes())}:${p(x.getSeconds())}`;
}

// filterForm is the search form shared by the Search and Top views.
export function filterForm(state, onSubmit, extra = []) {
  const custom = !!state.since;
  const form = h('form', {class: 'filters', 'aria-label': 'Search filters'},
    api.FILTERS.map(([key, label]) => field(label, key, state[key], {placeholder: 'any'})),
    field('Field selector', 'fieldSelector', state.fieldSelector, {placeholder: 'reason in (A,B),type!=Normal', class: 'wide'}),
    field('Label selector', 'labelSelector', state.labelSelector, {placeholder: 'app=web,tier!=db'}),
    select('Time range', 'range', custom ? 'custom' : (state.range || '1h'), [...api.RANGES, ['custom', 'Custom (from/to)']]),
    field('From', 'since', toLocalInput(state.since), {type: 'datetime-local', step: '1'}),
    field('To', 'until', toLocalInput(state.until), {type: 'datetime-local', step: '1'}),
    extra,
    h('div', {class: 'field actions'}, h('button', {type: 'submit'}, 'Search')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const next = {};
    for (const el of form.elements) {
      if (!el.name || !el.value.trim()) continue;
      next[el.name] = el.value.trim();
    }
    if (next.range === 'custom') {
      delete next.range;
      if (next.since) next.since = new Date(next.since).toISOString();
      if (next.until) next.until = new Date(next.until).toISOString();
    } else {
      delete next.since;
      delete next.until;
    }
    if (api.tenant()) next.tenant = api.tenant();
    onSubmit(next);
  });
  return form;
}

export function render(main, params, ctx) {
  const state = stateOf(params);
  const win = api.timeWindow(state);
  const aborter = new AbortController();
  const signal = aborter.signal;
  const go = (next) => ctx.navigate('search', next);
  const groupBy = state.groupBy === undefined ? 'type' : state.groupBy;

  const form = filterForm(state, (next) => {
    if (groupBy !== 'type') next.groupBy = groupBy;
    if (state.pageSize) next.pageSize = state.pageSize;
    go(next);
  });

  const groupSel = select('Stack by', 'groupBy', groupBy, [['type', 'Type'], ['reason', 'Reason'], ['', 'Nothing (totals)']]);
  groupSel.querySelector('select').addEventListener('change', (e) => {
    const next = {...state, groupBy: e.target.value};
    delete next.pageToken;
    go(next);
  });
  const chartEl = h('div', {id: 'histogram', class: 'chart', role: 'img', 'aria-label': 'Occurrences over time'});
  const histTotal = h('p', {id: 'histogram-total', class: 'muted'}, 'Loading…');
  const histTable = h('details', {class: 'data-details'}, h('summary', {}, 'Histogram as a table'));
  const facetsEl = h('aside', {id: 'facets', class: 'facets', 'aria-labelledby': 'facets-h'}, h('h2', {id: 'facets-h'}, 'Facets'));
  const resultsEl = h('section', {id: 'results', 'aria-labelledby': 'results-h'},
    h('h2', {id: 'results-h'}, 'Events'), h('p', {class: 'muted'}, 'Loading…'));

  main.append(h('h1', {}, 'Search'), form,
    h('section', {class: 'panel', 'aria-labelledby': 'hist-h'},
      h('div', {class: 'panel-head'}, h('h2', {id: 'hist-h'}, 'Occurrences over time'), groupSel),
      h('p', {class: 'hint'}, `${fmtTime(win.since)} – ${fmtTime(win.until)}. Drag across the chart to search that range.`),
      chartEl, histTotal, histTable),
    h('div', {class: 'split'}, facetsEl, resultsEl));

  let chartDone = null;
  const base = api.queryParams(state, win);

  // Histogram.
  const hp = [...base, ['limit', '10']];
  if (groupBy) hp.push(['groupBy', groupBy]);
  api.get('/v1/analytics/histogram', hp, signal).then((r) => {
    const times = (r.bucketStarts || []).map((t) => new Date(t).getTime() / 1000);
    let groups;
    if (groupBy && r.groups && r.groups.length) {
      groups = r.groups.map((g) => ({label: g.other ? 'other' : (g.values || []).join(' / ') || '(none)', counts: (g.counts || []).map(Number), color: g.other ? '#999999' : undefined}));
    } else {
      groups = [{label: 'All', counts: (r.totals || []).map(Number)}];
    }
    const total = Number(r.total || 0);
    histTotal.textContent = `${total} occurrences in ${times.length} buckets of ${r.bucket || '?'}`;
    histTotal.dataset.total = String(total);
    if (!times.length) return;
    chartDone = stackedBars(chartEl, times, groups, {
      onSelect: (since, until) => {
        const next = {...state, since: since.toISOString(), until: until.toISOString()};
        delete next.range;
        delete next.pageToken;
        go(next);
      },
    });
    histTable.append(dataTable('Occurrences per bucket', times, groups, 'histogram-table'));
  }).catch((err) => { histTotal.textContent = ''; ctx.showError(err); });

  // Facets.
  api.get('/v1/analytics/facets', [...base, ...FACETS.map(([d]) => ['dimensions', d]), ['limit', '8']], signal).then((r) => {
    for (const [i, f] of (r.facets || []).entries()) {
      const [, key, label] = FACETS[i];
      const active = new Set((state[key] || '').split(',').filter(Boolean));
      const items = (f.values || []).map((v) => {
        const on = active.has(v.value);
        return h('li', {}, h('button', {
          type: 'button', class: 'facet', 'aria-pressed': on ? 'true' : 'false',
          onclick: () => {
            const next = {...state};
            const vals = new Set(active);
            if (on) vals.delete(v.value); else vals.add(v.value);
            if (vals.size) next[key] = [...vals].join(','); else delete next[key];
            delete next.pageToken;
            go(next);
          },
        }, h('span', {class: 'facet-v'}, v.value || '(none)'), h('span', {class: 'facet-n'}, String(v.count))));
      });
      facetsEl.append(h('section', {class: 'facet-group'}, h('h3', {}, label), h('ul', {}, items)));
    }
  }).catch((err) => ctx.showError(err));

  // Results.
  const pageSize = state.pageSize || '50';
  const qp = [...base, ['pageSize', pageSize]];
  if (state.pageToken) qp.push(['pageToken', state.pageToken]);
  const queryKey = JSON.stringify(base);
  api.get('/v1/events', qp, signal).then((r) => {
    resultsEl.replaceChildren(h('h2', {id: 'results-h'}, 'Events'));
    const evs = r.events || [];
    const occ = evs.reduce((s, ev) => s + occurrences(ev), 0);
    resultsEl.append(h('p', {id: 'results-count', class: 'muted', dataset: {events: String(evs.length), occurrences: String(occ)}},
      `${evs.length} events (${occ} occurrences) on this page${r.nextPageToken ? '; more on the next' : ''}. resourceVersion ${r.resourceVersion || '—'}`));
    if (evs.length) resultsEl.append(resultsTable(evs));
    const stack = passed.get(queryKey) || [];
    const nav = h('div', {class: 'pager'});
    if (state.pageToken) {
      nav.append(h('button', {type: 'button', onclick: () => {
        const next = {...state};
        const prev = stack.pop();
        passed.set(queryKey, stack);
        if (prev) next.pageToken = prev; else delete next.pageToken;
        go(next);
      }}, 'Previous page'));
    }
    if (r.nextPageToken) {
      nav.append(h('button', {type: 'button', id: 'next-page', onclick: () => {
        stack.push(state.pageToken || '');
        passed.set(queryKey, stack);
        // A page token belongs to its query, window included: a relative
        // range is pinned to the times the first page was asked with.
        const next = {...state, since: win.since.toISOString(), until: win.until.toISOString(), pageToken: r.nextPageToken};
        delete next.range;
        go(next);
      }}, 'Next page'));
    }
    resultsEl.append(nav);
  }).catch((err) => {
    resultsEl.replaceChildren(h('h2', {id: 'results-h'}, 'Events'), h('p', {class: 'muted'}, 'No results: the query was refused.'));
    ctx.showError(err);
  });

  return () => { aborter.abort(); if (chartDone) chartDone(); };
}

// resultsTable is `kubectl get events -o wide`, with the namespace first.
export function resultsTable(evs) {
  const now = Date.now();
  const cols = ['Namespace', 'Last seen', 'Type', 'Reason', 'Object', 'Subobject', 'Source', 'Message', 'First seen', 'Count', 'Name'];
  return h('div', {class: 'table-wrap'}, h('table', {class: 'events', id: 'results-table'},
    h('thead', {}, h('tr', {}, cols.map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', {}, evs.map((ev) => {
      const reg = ev.regarding || {};
      const timeline = new URLSearchParams({'involving.kind': reg.kind || '', 'involving.namespace': reg.namespace || '', 'involving.name': reg.name || ''});
      return h('tr', {class: typeClass(ev.type)},
        h('td', {}, ev.namespace || ''),
        h('td', {title: fmtTime(lastSeen(ev))}, ago(lastSeen(ev), now)),
        h('td', {}, ev.type || ''),
        h('td', {}, h('a', {href: '#/event?uid=' + encodeURIComponent(ev.uid)}, ev.reason || '(no reason)')),
        h('td', {}, reg.kind ? h('a', {href: '#/timeline?' + timeline, title: 'Timeline of this object'}, objectRef(reg)) : ''),
        h('td', {}, reg.fieldPath || ''),
        h('td', {}, [ev.reportingController, ev.reportingInstance].filter(Boolean).join(', ')),
        h('td', {class: 'note'}, ev.note || ''),
        h('td', {title: fmtTime(ev.eventTime)}, ago(ev.eventTime, now)),
        h('td', {class: 'num'}, String(occurrences(ev))),
        h('td', {class: 'mono'}, ev.name || ''));
    }))));
}
