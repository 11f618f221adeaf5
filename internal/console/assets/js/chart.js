// Charts on uPlot (vendored): a stacked bar histogram with brush-to-zoom and
// a per-minute bar chart. Each chart has its numbers in a table beside it,
// for screen readers and for anyone who wants the exact counts.
import {h, fmtTime} from './dom.js';

// A palette distinguishable in both themes and by most color-blind readers
// (Okabe–Ito, with grey for "other").
export const COLORS = ['#0072B2', '#E69F00', '#009E73', '#D55E00', '#CC79A7', '#56B4E9', '#F0E442', '#000000', '#8C6D31', '#6B6ECF', '#999999'];

function sizeOf(el, height) {
  return {width: Math.max(280, el.clientWidth || 600), height};
}

// follow resizes a chart with its container; it returns the disconnect.
function follow(u, el, height) {
  const ro = new ResizeObserver(() => u.setSize(sizeOf(el, height)));
  ro.observe(el);
  return () => { ro.disconnect(); u.destroy(); };
}

// stackedBars draws groups (label, counts) over times (seconds) stacked.
// onSelect(since, until) is called with the dragged time range (Dates).
export function stackedBars(el, times, groups, {height = 220, onSelect, label = 'Occurrences'} = {}) {
  const uPlot = window.uPlot;
  if (times.length === 1) {
    // A lone bucket: an empty one either side gives the time axis a scale.
    times = [times[0] - 60, times[0], times[0] + 60];
    groups = groups.map((g) => ({...g, counts: [0, g.counts[0], 0]}));
  }
  const n = times.length;
  // Series k is the sum of groups 0..k; drawn from the tallest down so the
  // smaller sums cover them, which leaves each group's own band visible.
  const sums = [];
  let acc = new Array(n).fill(0);
  for (const g of groups) {
    acc = acc.map((v, i) => v + g.counts[i]);
    sums.push(acc);
  }
  const order = groups.map((_, k) => k).reverse();
  // A time is the start of its bucket: bars extend right from it, and the
  // x range ends one bucket after the last.
  const step = times[1] - times[0];
  const bars = uPlot.paths.bars({size: [0.9, 80], align: 1});
  const series = [{label: 'Time', value: (u, v) => (v == null ? '' : fmtTime(v * 1000))}];
  for (const k of order) {
    const color = groups[k].color || COLORS[k % COLORS.length];
    series.push({
      label: groups[k].label,
      stroke: color,
      fill: color,
      width: 0,
      paths: bars,
      points: {show: false},
      // The legend shows the group's own count, not the stack's height.
      value: (u, v, si, di) => (di == null ? '' : String(groups[k].counts[di])),
    });
  }
  const opts = {
    ...sizeOf(el, height),
    series,
    scales: {
      x: {time: true, range: (u, min, max) => [min, max + step]},
      y: {range: (u, min, max) => [0, Math.max(1, max)]},
    },
    // Counts are whole: no 0.2 ticks.
    axes: [{}, {label, size: 50, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 1e7, 1e8]}],
    cursor: {drag: {x: true, y: false, setScale: false}},
    legend: {live: true},
    hooks: {
      setSelect: [(u) => {
        if (!onSelect || u.select.width < 3) return;
        const a = u.posToVal(u.select.left, 'x');
        const b = u.posToVal(u.select.left + u.select.width, 'x');
        u.setSelect({left: 0, width: 0, top: 0, height: 0}, false);
        onSelect(new Date(a * 1000), new Date(b * 1000));
      }],
    },
  };
  const u = new uPlot(opts, [times, ...order.map((k) => sums[k])], el);
  return follow(u, el, height);
}

// dataTable is the numbers of a chart: one row per time, one column per group.
export function dataTable(caption, times, groups, id) {
  return h('table', {class: 'data', id},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, h('th', {scope: 'col'}, 'Time'), groups.map((g) => h('th', {scope: 'col'}, g.label)))),
    h('tbody', {}, times.map((t, i) => h('tr', {},
      h('th', {scope: 'row'}, fmtTime(t * 1000)),
      groups.map((g) => h('td', {class: 'num'}, String(g.counts[i])))))));
}
