// Series: the event series active in the window (ongoing and finished), with
// their counts and rate, and the occurrences per minute of the one picked.
import * as api from './api.js';
import {h, select, fmtTime, objectRef} from './dom.js';
import {filterForm} from './search.js';
import {stackedBars, dataTable} from './chart.js';

export function render(main, params, ctx) {
  const state = Object.fromEntries(params);
  const win = api.timeWindow(state);
  const aborter = new AbortController();
  let chartDone = null;

  const form = filterForm(state, (next) => ctx.navigate('series', next), [
    select('State', 'state', state.state || '', [['', 'Any'], ['Ongoing', 'Ongoing'], ['Finished', 'Finished']]),
  ]);
  const list = h('section', {id: 'series', 'aria-labelledby': 'series-h'}, h('h2', {id: 'series-h'}, 'Series'), h('p', {class: 'muted'}, 'Loading…'));
  const chartHead = h('h2', {id: 'minutes-h'}, 'Occurrences per minute');
  const chartEl = h('div', {id: 'minutes', class: 'chart', role: 'img', 'aria-labelledby': 'minutes-h'});
  const table = h('details', {class: 'data-details'}, h('summary', {}, 'Occurrences per minute as a table'));
  main.append(h('h1', {}, 'Series'), form, h('section', {class: 'panel'}, chartHead, chartEl, table), list);

  function show(s) {
    if (chartDone) { chartDone(); chartDone = null; }
    chartEl.replaceChildren();
    table.replaceChildren(h('summary', {}, 'Occurrences per minute as a table'));
    chartHead.textContent = `Occurrences per minute: ${s.reason} on ${objectRef(s.regarding)}`;
    const mins = s.minutes || [];
    const times = mins.map((m) => new Date(m.minute).getTime() / 1000);
    const groups = [{label: s.reason || 'occurrences', counts: mins.map((m) => Number(m.count))}];
    if (times.length) chartDone = stackedBars(chartEl, times, groups, {height: 180});
    table.append(dataTable('Occurrences per minute', times, groups, 'minutes-table'));
  }

  const p = [...api.queryParams(state, win), ['limit', '100'], ['orderBy', 'lastObserved']];
  if (state.state) p.push(['state', state.state]);
  api.get('/v1/analytics/series', p, aborter.signal).then((r) => {
    const all = r.series || [];
    list.replaceChildren(h('h2', {id: 'series-h'}, `Series (${all.length} of ${r.total || 0})`));
    if (!all.length) { list.append(h('p', {class: 'muted'}, 'No series in this window.')); return; }
    const rows = all.map((s) => h('tr', {},
      h('td', {}, h('button', {type: 'button', class: 'link', onclick: () => show(s)}, s.reason || '(no reason)')),
      h('td', {}, s.type || ''),
      h('td', {}, h('a', {href: '#/timeline?' + new URLSearchParams({'involving.kind': s.regarding?.kind || '', 'involving.namespace': s.regarding?.namespace || '', 'involving.name': s.regarding?.name || ''})}, objectRef(s.regarding))),
      h('td', {}, s.namespace || ''),
      h('td', {class: 'num'}, String(Number(s.count || 0))),
      h('td', {class: 'num'}, String(Number(s.windowCount || 0))),
      h('td', {class: 'num'}, Number(s.ratePerMinute || 0).toFixed(1)),
      h('td', {}, s.state || ''),
      h('td', {}, fmtTime(s.firstObserved)),
      h('td', {}, fmtTime(s.lastObserved)),
      h('td', {}, h('a', {href: '#/event?uid=' + encodeURIComponent(s.uid)}, 'event'))));
    list.append(h('div', {class: 'table-wrap'}, h('table', {class: 'events', id: 'series-table'},
      h('thead', {}, h('tr', {}, ['Reason', 'Type', 'Object', 'Namespace', 'Count', 'In window', 'Per minute', 'State', 'First', 'Last', ''].map((c) => h('th', {scope: 'col'}, c)))),
      h('tbody', {}, rows))));
    show(all[0]);
  }).catch((err) => { list.replaceChildren(h('h2', {id: 'series-h'}, 'Series'), h('p', {class: 'muted'}, 'Refused.')); ctx.showError(err); });

  return () => { aborter.abort(); if (chartDone) chartDone(); };
}
