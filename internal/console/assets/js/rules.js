// Rules: the picked tenant's rules (condition, destination, paused or not)
// and, for the one picked, its notifications and how their delivery went.
import * as api from './api.js';
import {h, fmtTime} from './dom.js';

function conditionText(c) {
  if (!c) return '';
  if (c.every) return 'every event';
  if (c.count) return `≥ ${c.count.threshold} within ${c.count.window}` + (c.count.groupBy?.length ? ` per ${c.count.groupBy.join(', ')}` : '');
  if (c.series) return `series count ≥ ${c.series.threshold || 2}`;
  if (c.absence) return `none for ${c.absence.window}`;
  if (c.recovery) return 'recovery (Normal after Warning)';
  return '';
}

function destinationText(d) {
  if (!d) return '';
  if (d.webhook) return 'webhook ' + d.webhook.url;
  if (d.slack) return 'Slack ' + d.slack.url;
  if (d.cloudevents) return 'CloudEvents ' + d.cloudevents.url;
  if (d.nats) return 'NATS ' + d.nats.subject;
  return '';
}

function statusText(s) {
  return (s || 'DELIVERY_STATUS_UNSPECIFIED').replace('DELIVERY_STATUS_', '').replace('UNSPECIFIED', 'queued').toLowerCase();
}

function table(id, caption, head, rows) {
  return h('div', {class: 'table-wrap'}, h('table', {class: 'events', id},
    h('caption', {class: 'muted'}, caption),
    h('thead', {}, h('tr', {}, head.map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', {}, rows)));
}

export function render(main, params, ctx) {
  const aborter = new AbortController();
  const tenant = api.tenant();
  const form = h('form', {class: 'inline', onsubmit: (e) => { e.preventDefault(); ctx.navigate('rules', {}); }},
    h('button', {type: 'submit'}, 'Refresh'));
  const list = h('section', {id: 'rules', 'aria-labelledby': 'rules-h'}, h('h2', {id: 'rules-h'}, 'Rules'));
  const deliveries = h('section', {id: 'deliveries', 'aria-labelledby': 'deliveries-h'});
  main.append(h('h1', {}, 'Rules'), form, list, deliveries);
  if (!tenant) {
    list.append(h('p', {class: 'muted'}, 'Rules belong to a tenant: pick one above.'));
    return () => aborter.abort();
  }
  const tp = api.withTenant([], tenant);

  function showDeliveries(name) {
    deliveries.replaceChildren(h('h2', {id: 'deliveries-h'}, `Deliveries of ${name}`), h('p', {class: 'muted'}, 'Loading…'));
    api.get('/v1/rules/' + encodeURIComponent(name) + '/deliveries', tp, aborter.signal).then((r) => {
      const ds = r.deliveries || [];
      deliveries.replaceChildren(h('h2', {id: 'deliveries-h'}, `Deliveries of ${name} (${ds.length})`));
      if (!ds.length) { deliveries.append(h('p', {class: 'muted'}, 'No notification yet.')); return; }
      deliveries.append(table('deliveries-table', 'Newest first', ['Notification', 'State', 'Status', 'Attempts', 'Last attempt', 'Latency', 'Last error'],
        ds.map((d) => {
          const as = d.attempts || [];
          const last = as[as.length - 1] || {};
          return h('tr', {class: d.status === 'DELIVERY_STATUS_DEAD' ? 'warn' : ''},
            h('td', {}, d.notificationId), h('td', {}, d.state || ''), h('td', {}, statusText(d.status)),
            h('td', {class: 'num'}, String(as.length)), h('td', {}, fmtTime(last.time)), h('td', {}, last.latency || ''),
            h('td', {}, last.error || ''));
        })));
    }).catch((err) => { deliveries.replaceChildren(); ctx.showError(err); });
  }

  api.get('/v1/rules', tp, aborter.signal).then((r) => {
    const rules = r.rules || [];
    list.replaceChildren(h('h2', {id: 'rules-h'}, `Rules (${rules.length})`));
    if (!rules.length) { list.append(h('p', {class: 'muted'}, 'No rule in this tenant.')); return; }
    list.append(table('rules-table', 'Pick a rule to see its deliveries', ['Name', 'Filter', 'Condition', 'Destination', 'Paused'],
      rules.map((rule) => h('tr', {class: rule.paused ? 'warn' : ''},
        h('td', {}, h('button', {type: 'button', class: 'link', onclick: () => ctx.navigate('rules', {rule: rule.name})}, rule.name)),
        h('td', {}, [rule.fieldSelector, rule.labelSelector].filter(Boolean).join(' ; ') || 'every event'),
        h('td', {}, conditionText(rule.condition)),
        h('td', {}, destinationText(rule.destination)),
        h('td', {}, rule.paused ? 'paused: ' + (rule.status?.pausedReason || 'by a user') : 'no')))));
    const picked = params.get('rule');
    if (picked) showDeliveries(picked);
  }).catch((err) => { list.replaceChildren(h('h2', {id: 'rules-h'}, 'Rules'), h('p', {class: 'muted'}, 'Refused.')); ctx.showError(err); });

  return () => aborter.abort();
}
