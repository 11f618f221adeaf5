// Top: the values of one dimension with the most occurrences in the window,
// their share, and their change against the previous window of the same
// length (the trend).
import * as api from './api.js';
import {h, select, field, fmtTime} from './dom.js';
import {filterForm} from './search.js';

const DIMENSIONS = [['reason', 'Reason'], ['type', 'Type'], ['regarding.kind', 'Kind'], ['namespace', 'Namespace'],
  ['reportingController', 'Controller'], ['action', 'Action'], ['tenant', 'Tenant']];

// The filter a value of each dimension sets in Search.
const FILTER_OF = {reason: 'reason', type: 'type', 'regarding.kind': 'kind', namespace: 'namespace', reportingController: 'controller'};

export function render(main, params, ctx) {
  const state = Object.fromEntries(params);
  const dimension = state.dimension || 'reason';
  const limit = state.limit || '10';
  const win = api.timeWindow(state);
  const aborter = new AbortController();

  const form = filterForm(state, (next) => ctx.navigate('top', next), [
    select('Dimension', 'dimension', dimension, DIMENSIONS),
    field('How many', 'limit', limit, {type: 'number', min: '1', max: '1000'}),
  ]);
  const out = h('section', {id: 'top', 'aria-labelledby': 'top-h'}, h('h2', {id: 'top-h'}, 'Top ' + limit), h('p', {class: 'muted'}, 'Loading…'));
  main.append(h('h1', {}, 'Top'), form, out);

  const p = [...api.queryParams(state, win), ['dimension', dimension], ['limit', limit]];
  api.get('/v1/analytics/top', p, aborter.signal).then((r) => {
    const total = Number(r.total || 0);
    const prevTotal = Number(r.previousTotal || 0);
    const max = Math.max(1, ...(r.entries || []).map((e) => Number(e.count)));
    out.replaceChildren(h('h2', {id: 'top-h'}, `Top ${limit} by ${dimension}`),
      h('p', {class: 'muted'}, `${fmtTime(r.since)} – ${fmtTime(r.until)}: ${total} occurrences (previous window: ${prevTotal}; ${trendText(total, prevTotal)}), ${r.distinctValues || 0} distinct values.`));
    const rows = (r.entries || []).map((e) => {
      const count = Number(e.count);
      const change = e.change === undefined ? null : Number(e.change);
      const key = FILTER_OF[dimension];
      const search = key ? '#/search?' + new URLSearchParams({...pick(state), [key]: e.value}) : null;
      return h('tr', {},
        h('th', {scope: 'row'}, search ? h('a', {href: search}, e.value || '(none)') : (e.value || '(none)')),
        h('td', {class: 'num'}, String(count)),
        h('td', {class: 'bar-cell'}, h('meter', {min: '0', max: String(max), value: String(count), 'aria-label': `${e.value}: ${count}`}),
          ' ', `${(Number(e.share || 0) * 100).toFixed(1)}%`),
        h('td', {class: 'num'}, String(Number(e.previousCount || 0))),
        h('td', {class: 'num ' + trendClass(change)}, changeText(change)));
    });
    out.append(h('div', {class: 'table-wrap'}, h('table', {class: 'events', id: 'top-table'},
      h('thead', {}, h('tr', {}, ['Value', 'Count', 'Share', 'Previous window', 'Change'].map((c) => h('th', {scope: 'col'}, c)))),
      h('tbody', {}, rows))));
  }).catch((err) => { out.replaceChildren(h('h2', {id: 'top-h'}, 'Top'), h('p', {class: 'muted'}, 'Refused.')); ctx.showError(err); });
  return () => aborter.abort();
}

// pick keeps the search state a Top link carries into Search.
function pick(state) {
  const out = {};
  for (const [k, v] of Object.entries(state)) if (k !== 'dimension' && k !== 'limit') out[k] = v;
  return out;
}

function changeText(change) {
  if (change === null) return 'new';
  const pct = Math.round(change * 100);
  return (pct > 0 ? '▲ +' : pct < 0 ? '▼ ' : '± ') + pct + '%';
}

function trendClass(change) {
  if (change === null) return 'up';
  return change > 0 ? 'up' : change < 0 ? 'down' : '';
}

function trendText(now, prev) {
  if (!prev) return now ? 'new' : 'no change';
  return changeText((now - prev) / prev);
}
