// Event detail (the whole event: series, labels, annotations, metadata) and
// the timeline of an object (everything that regarded or related to it,
// each series drawn as a span from its first to its last occurrence).
import * as api from './api.js';
import {h, fmtTime, objectRef, tenantText, typeClass} from './dom.js';

function kv(map) {
  const entries = Object.entries(map || {});
  if (!entries.length) return h('span', {class: 'muted'}, 'none');
  return h('ul', {class: 'kv'}, entries.sort().map(([k, v]) => h('li', {}, h('code', {}, k), ' = ', h('code', {}, v))));
}

function ref(o) {
  if (!o || !o.kind) return h('span', {class: 'muted'}, 'none');
  return [o.apiVersion, o.kind, o.namespace ? o.namespace + '/' + o.name : o.name, o.uid && `uid ${o.uid}`, o.fieldPath && `field ${o.fieldPath}`]
    .filter(Boolean).join(' · ');
}

export function timelineHref(o) {
  const p = new URLSearchParams({'involving.kind': o.kind || '', 'involving.name': o.name || ''});
  if (o.namespace) p.set('involving.namespace', o.namespace);
  return '#/timeline?' + p;
}

export const event = {
  render(main, params, ctx) {
    const uid = params.get('uid') || '';
    const aborter = new AbortController();
    main.append(h('h1', {}, 'Event'), h('p', {class: 'muted'}, 'Loading…'));
    const p = api.withTenant([]);
    api.get('/v1/events/' + encodeURIComponent(uid), p, aborter.signal).then((ev) => {
      const s = ev.series;
      const rows = [
        ['Reason', ev.reason], ['Type', ev.type], ['Note', ev.note], ['Action', ev.action],
        ['Regarding', ref(ev.regarding)], ['Related', ref(ev.related)],
        ['Event time', fmtTime(ev.eventTime)],
        ['Series', s ? `${s.count} occurrences, ${s.state || 'Ongoing'}, last ${fmtTime(s.lastObservedTime)}` : 'none (a single occurrence)'],
        ['Reporting controller', ev.reportingController], ['Reporting instance', ev.reportingInstance],
        ['Namespace', ev.namespace], ['Name', ev.name], ['Uid', ev.uid], ['Tenant', tenantText(ev.tenant)],
        ['resourceVersion', ev.resourceVersion],
        ['Labels', kv(ev.labels)], ['Annotations', kv(ev.annotations)], ['Metadata', kv(ev.metadata)],
      ];
      const links = [];
      if (ev.regarding && ev.regarding.kind) links.push(h('a', {id: 'timeline-link', class: 'button', href: timelineHref(ev.regarding)}, `Timeline of ${objectRef(ev.regarding)}`));
      if (ev.related && ev.related.kind) links.push(h('a', {class: 'button', href: timelineHref(ev.related)}, `Timeline of ${objectRef(ev.related)}`));
      main.replaceChildren(h('h1', {class: typeClass(ev.type)}, `${ev.reason || 'Event'} on ${objectRef(ev.regarding)}`),
        h('div', {class: 'toolbar'}, links),
        h('dl', {class: 'detail', id: 'event-detail'}, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' ? h('span', {class: 'muted'}, '—') : v)])));
    }).catch((err) => { main.replaceChildren(h('h1', {}, 'Event'), h('p', {class: 'muted'}, 'Not shown.')); ctx.showError(err); });
    return () => aborter.abort();
  },
};

export const timeline = {
  render(main, params, ctx) {
    const inv = {};
    for (const k of ['kind', 'namespace', 'name', 'uid', 'apiVersion']) {
      const v = params.get('involving.' + k);
      if (v) inv[k] = v;
    }
    const aborter = new AbortController();
    const title = `Timeline of ${objectRef(inv) || inv.uid || 'an object'}${inv.namespace ? ' in ' + inv.namespace : ''}`;
    const list = h('ol', {id: 'timeline', class: 'timeline', 'aria-label': title});
    const axis = h('p', {class: 'muted', id: 'timeline-range'});
    const more = h('div', {class: 'pager'});
    main.append(h('h1', {}, title), axis, list, more);
    const entries = [];

    const load = (token) => {
      const p = api.withTenant(Object.entries(inv).map(([k, v]) => ['involving.' + k, v]));
      p.push(['limit', '200']);
      if (token) p.push(['pageToken', token]);
      api.get('/v1/analytics/timeline', p, aborter.signal).then((r) => {
        entries.push(...(r.entries || []));
        draw();
        more.replaceChildren();
        if (r.nextPageToken) more.append(h('button', {type: 'button', onclick: () => load(r.nextPageToken)}, 'Load more'));
      }).catch((err) => ctx.showError(err));
    };

    function draw() {
      if (!entries.length) { list.replaceChildren(h('li', {class: 'muted'}, 'Nothing happened to this object (or the token may not read it).')); return; }
      const t0 = Math.min(...entries.map((e) => new Date(e.firstObserved).getTime()));
      const t1 = Math.max(...entries.map((e) => new Date(e.lastObserved).getTime()));
      const span = Math.max(1000, t1 - t0);
      axis.textContent = `${entries.length} entries from ${fmtTime(t0)} to ${fmtTime(t1)}`;
      list.replaceChildren(...entries.map((e) => {
        const ev = e.event || {};
        const a = new Date(e.firstObserved).getTime();
        const b = new Date(e.lastObserved).getTime();
        const n = Number(e.occurrences || 1);
        const bar = h('span', {class: 'span ' + (n > 1 ? 'series' : 'single') + ' ' + typeClass(ev.type)});
        bar.style.left = ((a - t0) / span * 100).toFixed(3) + '%';
        bar.style.width = Math.max(0.6, (b - a) / span * 100).toFixed(3) + '%';
        return h('li', {class: 'tl-entry', dataset: {occurrences: String(n)}},
          h('div', {class: 'tl-label'},
            h('a', {href: '#/event?uid=' + encodeURIComponent(ev.uid || '')}, ev.reason || '(no reason)'),
            ' ', h('span', {class: 'badge'}, n > 1 ? `series ×${n}` : 'once'),
            ' ', h('span', {class: 'muted'}, `${e.role} · ${fmtTime(e.firstObserved)}${n > 1 ? ' → ' + fmtTime(e.lastObserved) : ''}`),
            ev.note ? h('div', {class: 'tl-note'}, ev.note) : null),
          h('div', {class: 'tl-track', 'aria-hidden': 'true'}, bar));
      }));
    }
    load('');
    return () => aborter.abort();
  },
};
