// Small line charts drawn as SVG from numbers (no text from tasks goes into them): a title, the
// latest value, and the line over the sampled history.

import { h, svg } from './dom.js';

const W = 240;
const H = 64;

/** `points`: [{t: Date, v: number|null}] oldest first; `format(v)` writes the latest value. */
export function lineChart(title, points, format = (v) => String(v)) {
  const values = points.filter((p) => p.v !== null && Number.isFinite(p.v));
  const latest = values.length ? format(values[values.length - 1].v) : 'no data yet';
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-hidden': 'true', preserveAspectRatio: 'none' });
  if (values.length >= 2) {
    const t0 = values[0].t.getTime();
    const span = Math.max(values[values.length - 1].t.getTime() - t0, 1);
    const max = Math.max(...values.map((p) => p.v), 1e-9);
    const xy = values.map((p) => [((p.t.getTime() - t0) / span) * (W - 4) + 2, H - 4 - (p.v / max) * (H - 10)]);
    const line = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
    chart.append(
      svg('polygon', { points: `2,${H - 4} ${line} ${(W - 2).toFixed(1)},${H - 4}`, class: 'area' }),
      svg('polyline', { points: line, class: 'line' }),
      svg('line', { x1: 2, y1: H - 4, x2: W - 2, y2: H - 4, class: 'axis' }));
  }
  const range = values.length >= 2 ? `${values.length} samples, peak ${format(Math.max(...values.map((p) => p.v)))}` : '';
  return h('figure', { class: 'card chart-card' },
    h('figcaption', {}, h('span', {}, title), h('b', {}, latest)),
    chart,
    h('small', { class: 'muted' }, range));
}
