// Live tail: the REST watch (NDJSON over fetch, so the token goes in a
// header), shown newest first in a bounded, virtualized list. It resumes from
// the last resourceVersion after a pause or a dropped stream (with backoff),
// and re-lists on 410 Gone, as a Kubernetes informer does.
import * as api from './api.js';
import {h, field, fmtTime, objectRef, occurrences, lastSeen, tenantText, typeClass} from './dom.js';

const CAPACITY = 5000; // events kept; older ones fall off the end
const ROW_HEIGHT = 28; // px, fixed so that rows can be placed without measuring
const RELIST_PAGE = 100;

export function render(main, params, ctx) {
  const state = Object.fromEntries(params);
  const form = h('form', {class: 'filters', 'aria-label': 'Live tail filters'},
    api.FILTERS.map(([key, label]) => field(label, key, state[key], {placeholder: key === 'type' || key === 'reason' || key === 'controller' ? 'any (a,b)' : 'any'})),
    h('div', {class: 'field actions'}, h('button', {type: 'submit'}, 'Apply')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const next = {};
    for (const [key] of api.FILTERS) { const v = form.elements[key].value.trim(); if (v) next[key] = v; }
    ctx.navigate('tail', next);
  });

  // Its label says what it does next (no aria-pressed: a toggle whose label
  // changes would be announced twice).
  const pause = h('button', {type: 'button', id: 'tail-pause'}, 'Pause');
  const clear = h('button', {type: 'button', id: 'tail-clear'}, 'Clear');
  const status = h('span', {id: 'tail-status', class: 'status', role: 'status'}, 'Connecting…');
  const rate = h('output', {id: 'tail-rate', 'aria-label': 'Events per second'}, '0 events/s');
  const received = h('output', {id: 'tail-count', 'aria-label': 'Events received'}, '0 received');
  const viewport = h('div', {id: 'tail-list', class: 'tail-viewport', role: 'list', 'aria-label': 'Live events, newest first', tabindex: '0'});

  main.append(h('h1', {}, 'Live tail'), form,
    h('div', {class: 'toolbar'}, pause, clear, status, rate, received),
    h('div', {class: 'tail-head', 'aria-hidden': 'true'},
      ['Last seen', 'Type', 'Reason', 'Object', 'Namespace', 'Count', 'Tenant', 'Message'].map((t) => h('span', {}, t))),
    viewport);

  const list = new VirtualList(viewport, CAPACITY, ROW_HEIGHT);
  list.onDraw = () => { received.textContent = `${tail.total} received`; };
  const tail = new Tail(state, list, {
    status: (s) => { status.textContent = s; },
    rate: (r) => { rate.textContent = `${r} events/s`; },
    error: ctx.showError,
    clearError: ctx.clearError,
    stopped: () => { pause.textContent = 'Resume'; },
  });
  pause.addEventListener('click', () => {
    if (tail.running) {
      tail.pause();
      pause.textContent = 'Resume';
    } else {
      tail.resume();
      pause.textContent = 'Pause';
    }
  });
  clear.addEventListener('click', () => list.clear());
  tail.start();
  return () => tail.stop();
}

// VirtualList keeps the newest CAPACITY events in a ring and puts in the
// DOM only the rows the viewport shows, reusing their elements: the page
// costs the same at 2,000 events/s as at 2.
class VirtualList {
  constructor(viewport, capacity, rowHeight) {
    this.viewport = viewport;
    this.ring = new Array(capacity);
    this.capacity = capacity;
    this.start = 0; // index of the oldest kept event
    this.size = 0;
    this.rowHeight = rowHeight;
    this.added = 0; // since the last draw, to keep a scrolled view still
    this.spacer = h('div', {class: 'tail-spacer'});
    this.rows = [];
    this.empty = h('div', {class: 'tail-empty'}, 'Waiting for events…');
    viewport.append(this.spacer, this.empty);
    viewport.addEventListener('scroll', () => this.schedule(), {passive: true});
    this.resize = () => this.schedule();
    window.addEventListener('resize', this.resize);
    this.frame = 0;
    this.onDraw = null;
  }

  push(ev) {
    if (this.size < this.capacity) {
      this.ring[(this.start + this.size) % this.capacity] = ev;
      this.size++;
    } else {
      this.ring[this.start] = ev;
      this.start = (this.start + 1) % this.capacity;
    }
    this.added++;
    this.schedule();
  }

  // at is the i-th newest event.
  at(i) { return this.ring[(this.start + this.size - 1 - i) % this.capacity]; }

  clear() {
    this.start = 0;
    this.size = 0;
    this.ring = new Array(this.capacity);
    this.schedule();
  }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
  }

  destroy() {
    if (this.frame) cancelAnimationFrame(this.frame);
    window.removeEventListener('resize', this.resize);
  }

  draw() {
    const vp = this.viewport;
    if (this.added && vp.scrollTop > 0) {
      // Someone is reading further down: new rows on top must not move
      // what they read.
      vp.scrollTop += this.added * this.rowHeight;
    }
    this.added = 0;
    this.spacer.style.height = this.size * this.rowHeight + 'px';
    this.empty.hidden = this.size > 0;
    const first = Math.floor(vp.scrollTop / this.rowHeight);
    const want = Math.ceil((vp.clientHeight || 600) / this.rowHeight) + 1;
    while (this.rows.length < want) {
      const row = new Row();
      this.rows.push(row);
      vp.append(row.el);
    }
    for (let j = 0; j < this.rows.length; j++) {
      const i = first + j;
      const row = this.rows[j];
      if (j < want && i < this.size) row.show(this.at(i), i * this.rowHeight);
      else row.hide();
    }
    if (this.onDraw) this.onDraw();
  }
}

// Row is one reusable row element; show fills it with an event.
class Row {
  constructor() {
    this.cells = {
      time: h('span', {class: 'c-time'}),
      type: h('span', {class: 'c-type'}),
      reason: h('a', {class: 'c-reason'}),
      object: h('span', {class: 'c-object'}),
      namespace: h('span', {class: 'c-ns'}),
      count: h('span', {class: 'c-count'}),
      tenant: h('span', {class: 'c-tenant'}),
      note: h('span', {class: 'c-note'}),
    };
    this.el = h('div', {class: 'tail-row', role: 'listitem'}, Object.values(this.cells));
    this.ev = null;
  }

  show(ev, top) {
    this.el.hidden = false;
    this.el.style.transform = `translateY(${top}px)`;
    if (this.ev === ev) return;
    this.ev = ev;
    const c = this.cells;
    c.time.textContent = fmtTime(lastSeen(ev)).slice(11);
    c.type.textContent = ev.type || '';
    this.el.className = 'tail-row ' + typeClass(ev.type);
    c.reason.textContent = ev.reason || '(no reason)';
    c.reason.href = '#/event?uid=' + encodeURIComponent(ev.uid || '');
    c.object.textContent = objectRef(ev.regarding);
    c.namespace.textContent = ev.namespace || '';
    c.count.textContent = String(occurrences(ev));
    c.tenant.textContent = tenantText(ev.tenant);
    c.note.textContent = ev.note || '';
    c.note.title = ev.note || '';
  }

  hide() {
    this.el.hidden = true;
    this.ev = null;
  }
}

class WatchError extends Error {
  constructor(status, body) {
    super('');
    this.apiError = new api.ApiError(status, body);
    this.message = this.apiError.message;
    this.status = status;
  }
}

const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 16000, 30000];

// Tail runs one watch at a time: list (for the resourceVersion to start
// from), then watch, resuming after a drop and re-listing on 410.
class Tail {
  constructor(state, list, ui) {
    this.state = state;
    this.list = list;
    this.ui = ui;
    this.rv = '';
    this.shown = 0; // highest resourceVersion in the list, so a re-list adds only what is new
    this.relisted = false;
    this.running = false;
    this.total = 0;
    this.tick = 0;
    this.ctrl = null;
    this.generation = 0;
  }

  start() {
    this.lastTick = performance.now();
    this.timer = setInterval(() => {
      const now = performance.now();
      this.ui.rate(Math.round(this.tick * 1000 / (now - this.lastTick)));
      this.tick = 0;
      this.lastTick = now;
    }, 1000);
    this.resume();
  }

  stop() {
    this.pause();
    clearInterval(this.timer);
    this.list.destroy();
  }

  pause() {
    this.running = false;
    this.generation++;
    if (this.ctrl) this.ctrl.abort();
    this.ui.status(this.rv ? `Paused at resourceVersion ${this.rv}` : 'Paused');
  }

  resume() {
    if (this.running) return;
    this.running = true;
    this.run(++this.generation);
  }

  // live is whether generation is still the current run.
  live(generation) { return this.running && generation === this.generation; }

  async run(generation) {
    let attempt = 0;
    if (!this.rv) await this.relist(generation);
    while (this.live(generation)) {
      this.ctrl = new AbortController();
      try {
        await this.watch(this.ctrl.signal, () => { attempt = 0; });
        if (!this.live(generation)) return;
        this.ui.status('Stream ended; reconnecting…');
      } catch (err) {
        if (!this.live(generation)) return;
        if (err.status === 410) {
          // Our resourceVersion is older than the stream keeps: start over
          // from a fresh list.
          this.ui.status('410 Gone: re-listing…');
          this.rv = '';
          await this.relist(generation);
          this.relisted = true;
          continue;
        }
        if (err.status && err.status !== 429 && err.status < 500) {
          this.ui.error(err.apiError || err);
          this.ui.status(`Stopped: ${err.message}`);
          this.running = false;
          this.ui.stopped();
          return;
        }
        // A refusal as the API states it; a network failure as what it is.
        this.ui.error(err.apiError || new Error(`The watch stream dropped: ${err.message}`));
      }
      const base = BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)];
      const delay = Math.round(base * (0.8 + Math.random() * 0.4));
      attempt++;
      this.ui.status(`Disconnected; reconnecting in ${(delay / 1000).toFixed(1)}s (attempt ${attempt})`);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  // relist reads the newest matching events from Query and starts the
  // watch where that answer stands; without the query verb, it watches
  // from now.
  async relist(generation) {
    try {
      const q = await api.get('/v1/events', [...api.queryParams(this.state), ['pageSize', String(RELIST_PAGE)]]);
      if (!this.live(generation)) return;
      const evs = q.events || [];
      for (let i = evs.length - 1; i >= 0; i--) {
        if (Number(evs[i].resourceVersion) > this.shown) this.list.push(evs[i]);
      }
      for (const ev of evs) this.shown = Math.max(this.shown, Number(ev.resourceVersion) || 0);
      this.rv = q.resourceVersion || '';
    } catch (err) {
      if (err.status === 401) this.ui.error(err);
    }
  }

  async watch(signal, established) {
    const params = api.watchParams(this.state);
    if (this.rv) params.push(['resourceVersion', this.rv]);
    params.push(['bookmarkInterval', '5s']);
    const res = await fetch(api.url('/v1/events:watch', params), {headers: api.headers(), signal, cache: 'no-store'});
    if (!res.ok) {
      let body = null;
      try { body = await res.json(); } catch { /* no JSON body */ }
      throw new WatchError(res.status, body);
    }
    established();
    this.ui.clearError();
    const from = this.rv ? ` from resourceVersion ${this.rv}` : '';
    this.ui.status(this.relisted ? `Live (re-listed after 410 Gone${from})` : this.rv ? `Live (${from.trim()})` : 'Live');
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let rest = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      const lines = (rest + value).split('\n');
      rest = lines.pop();
      for (const line of lines) if (line) this.line(JSON.parse(line));
    }
  }

  line(msg) {
    if (msg.type === 'ERROR') throw new WatchError(msg.httpCode || 500, msg.error);
    const ev = msg.object || {};
    if (ev.resourceVersion) this.rv = ev.resourceVersion;
    if (msg.type === 'BOOKMARK') return;
    this.shown = Math.max(this.shown, Number(ev.resourceVersion) || 0);
    this.total++;
    this.tick++;
    this.list.push(ev);
  }
}
