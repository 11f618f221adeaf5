// The console's only way to the gateway: its public REST API, with the
// bearer token the user entered (kept in sessionStorage, sent in
// Authorization, never a cookie).

const TOKEN_KEY = 'eventgate.token';
const TENANT_KEY = 'eventgate.tenant';

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
}

// tenant is the picked tenant as "type/name" ("global" alone), or "" for
// every tenant the token may read.
export function tenant() { return sessionStorage.getItem(TENANT_KEY) || ''; }
export function setTenant(t) {
  if (t) sessionStorage.setItem(TENANT_KEY, t); else sessionStorage.removeItem(TENANT_KEY);
}

export function headers() {
  const t = token();
  return t ? {Authorization: 'Bearer ' + t} : {};
}

const REASONS = {
  400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed',
  410: 'Gone', 413: 'Payload Too Large', 429: 'Too Many Requests', 500: 'Internal Server Error',
  502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};

// ApiError is a refused request as the API states it: the HTTP status and
// the google.rpc.Status message (with the field it names, if any).
export class ApiError extends Error {
  constructor(status, body) {
    const msg = (body && body.message) || '';
    let text = `${status} ${REASONS[status] || ''}`.trim();
    if (msg) text += ': ' + msg;
    const fields = [];
    for (const d of (body && body.details) || []) {
      for (const v of d.fieldViolations || []) if (v.field) fields.push(v.field);
    }
    if (fields.length && !msg.includes(fields[0])) text += ` (field ${fields.join(', ')})`;
    super(text);
    this.status = status;
    this.body = body;
  }
}

// withTenant adds the picked tenant to params.
export function withTenant(params, t = tenant()) {
  if (!t) return params;
  const [type, ...rest] = t.split('/');
  params.push(['tenant.type', type]);
  if (rest.length) params.push(['tenant.name', rest.join('/')]);
  return params;
}

export function url(path, params) {
  const u = new URL(path, location.origin);
  for (const [k, v] of params || []) u.searchParams.append(k, v);
  return u;
}

// get fetches a JSON resource of the API; a refusal throws ApiError.
export async function get(path, params, signal) {
  const res = await fetch(url(path, params), {headers: headers(), signal, cache: 'no-store'});
  return decode(res);
}

export async function decode(res) {
  let body = null;
  try { body = await res.json(); } catch { /* an error without a JSON body */ }
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

// The filter fields a person types, by the name they have in the console's
// URLs, and the parameters they become in Query and analytics requests.
// Several values are comma-separated ("Warning,Normal"): any of them.
export const FILTERS = [
  // key, label, query parameter, watch parameter, repeated
  ['namespace', 'Namespace', 'namespace', 'namespace', false],
  ['kind', 'Kind', 'regarding.kind', 'kind', false],
  ['name', 'Name', 'regarding.name', 'name', false],
  ['type', 'Type', 'type', 'types', true],
  ['reason', 'Reason', 'reason', 'reasons', true],
  ['controller', 'Controller', 'reportingController', 'reportingControllers', true],
];

function values(v, repeated) {
  if (!v) return [];
  return repeated ? v.split(',').map((s) => s.trim()).filter(Boolean) : [v.trim()];
}

// queryParams turns the console's filter state into Query/analytics
// parameters (tenant, filters, selectors, window).
export function queryParams(state, win) {
  const p = withTenant([], state.tenant !== undefined ? state.tenant : tenant());
  for (const [key, , qp, , rep] of FILTERS) for (const v of values(state[key], rep)) p.push([qp, v]);
  if (state.fieldSelector) p.push(['fieldSelector', state.fieldSelector]);
  if (state.labelSelector) p.push(['labelSelector', state.labelSelector]);
  if (win) {
    p.push(['since', win.since.toISOString()]);
    p.push(['until', win.until.toISOString()]);
  }
  return p;
}

// watchParams turns it into StreamWatch parameters.
export function watchParams(state) {
  const p = withTenant([], tenant());
  for (const [key, , , wp, rep] of FILTERS) for (const v of values(state[key], rep)) p.push([wp, v]);
  return p;
}

export const RANGES = [['15m', 'Last 15 minutes'], ['1h', 'Last hour'], ['6h', 'Last 6 hours'],
  ['24h', 'Last 24 hours'], ['7d', 'Last 7 days'], ['30d', 'Last 30 days']];

const UNIT = {m: 60e3, h: 3600e3, d: 86400e3};

// window is the time range of state: its explicit since/until, else the
// relative range ending now.
export function timeWindow(state, now = new Date()) {
  if (state.since) {
    return {since: new Date(state.since), until: state.until ? new Date(state.until) : now};
  }
  const r = state.range || '1h';
  const ms = Number(r.slice(0, -1)) * (UNIT[r.slice(-1)] || UNIT.h);
  return {since: new Date(now - ms), until: now};
}
